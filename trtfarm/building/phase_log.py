"""Build progress on a farm worker: the builder's phases, logged.

Progress is a parameter, never a process-wide registry: ``trtfarm build`` passes its rich display
(``trtfarm/cli/progress.py``) to ``run_local``; a farm task (``tasks/job.py``) passes ``LoggingProgress`` with its
Prefect run logger, so the phases of each build show in that run's logs in the Prefect UI. Uploads log nothing.
"""

from __future__ import annotations

import logging

log = logging.getLogger("trtfarm.building.build")


class LoggingProgress:
    """Logs the start of the builder's top-level and second-level phases (a ``BuildProgress``) to ``logger``."""

    def __init__(self, target: str, logger: logging.Logger | logging.LoggerAdapter | None = None) -> None:
        self.target, self.logger = target, logger or log

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        """Log top-level and second-level phases."""
        if parent is None or parent == "Building engine":
            self.logger.info("%s: %s (%d steps)", self.target, name, steps)

    def step_complete(self, name: str, step: int) -> bool:
        """Never cancel."""
        return True

    def phase_finish(self, name: str) -> None:
        """Nothing to do."""
