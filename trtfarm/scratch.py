"""Scratch folders and files that are gone on every way out, SIGTERM included.

The command line's SIGTERM handler raises (``interrupt.stop``), and Python runs it between any two bytecodes: inside
a ``finally`` that is removing a temporary, or between creating one and entering the block that would remove it.
``tempfile.TemporaryDirectory`` leaves a folder behind in both windows. So each scratch path here is named and
recorded before it exists and forgotten only after it is removed, and ``remove_all()``, which the command line calls
on its way out of an interrupted run, removes whatever is still recorded. Thread-safe.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trtfarm.errors import scratch_failure

_LIVE: set[Path] = set()
_LOCK = threading.Lock()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def _recorded(path: Path) -> Iterator[Path]:
    """Record ``path`` before it exists; remove it on exit, then forget it."""
    with _LOCK:
        _LIVE.add(path)
    try:
        yield path
    finally:
        _remove(path)
        with _LOCK:
            _LIVE.discard(path)


@contextmanager
def scratch_dir(prefix: str, root: Path | None = None) -> Iterator[Path]:
    """A new private folder ``<root or TMPDIR>/<prefix><random>``, removed with everything in it on exit."""
    with _recorded(Path(root or tempfile.gettempdir()) / f"{prefix}{uuid.uuid4().hex[:16]}") as path:
        try:
            path.mkdir(mode=0o700)
        except OSError as err:
            raise scratch_failure(err, "a scratch folder") from err
        yield path


def scratch_file(parent: Path, prefix: str = ".tmp-"):
    """A fresh path ``parent/<prefix><random>`` for a file the caller writes, then renames or links; removed on exit."""
    return _recorded(Path(parent) / f"{prefix}{uuid.uuid4().hex}")


def remove_all() -> int:
    """Remove every scratch path still recorded (an interrupted run's); returns how many were recorded."""
    with _LOCK:
        paths = list(_LIVE)
        _LIVE.clear()
    for path in paths:
        _remove(path)
    return len(paths)
