"""A process-wide change held while any block of any thread needs it.

Made when the first block starts, undone when the last one ends: ModelOpt's replacements (``workarounds.py``), the
allocator's tuning (``heap.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class HeldWhileAny:
    """``make()`` when the first ``held()`` block starts; ``undo(what make returned)`` when the last one ends."""

    def __init__(self, make: Callable[[], Any], undo: Callable[[Any], None]) -> None:
        self._make, self._undo = make, undo
        self._lock = threading.Lock()
        self.count = 0  # the blocks holding it now
        self._made: Any = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within the block, the change is in place."""
        with self._lock:
            if self.count == 0:
                self._made = self._make()
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1
                if self.count == 0:
                    self._undo(self._made)
                    self._made = None
