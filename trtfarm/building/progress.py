"""Where build and upload progress goes. The CLI installs a rich progress display; workers log.

A small registry rather than a parameter because flows cross a serialisation boundary: the flow code asks for
``build_progress(target)`` and gets whatever the process that runs it installed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from trtfarm.store.base import Progress
from trtfarm.toolchain import BuildProgress

log = logging.getLogger("trtfarm.building.build")


class LoggingProgress:
    """Logs the start and end of the builder's top-level phases."""

    def __init__(self, target: str) -> None:
        self.target = target

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        """Log top-level and second-level phases."""
        if parent is None or parent == "Building engine":
            log.info("%s: %s (%d steps)", self.target, name, steps)

    def step_complete(self, name: str, step: int) -> bool:
        """Never cancel."""
        return True

    def phase_finish(self, name: str) -> None:
        """Nothing to do."""


_build: Callable[[str], BuildProgress] = LoggingProgress
_upload: Callable[[str], Progress] | None = None


def install(build: Callable[[str], BuildProgress], upload: Callable[[str], Progress] | None) -> None:
    """Route progress of every later build in this process to ``build(target)`` / ``upload(target)``."""
    global _build, _upload
    _build, _upload = build, upload


def build_progress(target: str) -> BuildProgress:
    """The progress sink for a build of ``target``."""
    return _build(target)


def upload_progress() -> Callable[[str], Progress] | None:
    """The upload progress factory, if one is installed."""
    return _upload
