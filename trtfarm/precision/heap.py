"""Large buffers reused while the precision step runs, not mapped afresh each time: glibc's malloc, tuned.

A conversion serialises and parses the model many times (ModelOpt's ONNX shape inference, its model-size checks,
its saves; the gate's sessions): on a 50 MB model each is a new buffer of 50 MB or more. glibc gives a block that
large a mapping of its own (``mmap``) and unmaps it when it is freed, so the kernel faults in and zeroes every page
of every buffer afresh: 1.5 million page faults and 3 s of system CPU in the int8 step of a 50 MB MLP, a third of
the step's CPU (bench/precision_speed.py). While a step runs, large blocks come from the heap instead
(``M_MMAP_MAX`` 0) and freed memory stays there for the next block (``M_TRIM_THRESHOLD``): the same pages are
reused, and the faults fall to a sixth. What the step computes is unchanged, only where its memory comes from;
its peak resident memory is the same.

When the last step of the process ends, large blocks are mapped again, at the thresholds glibc's own adjustment
reaches once a 32 MiB block is freed (set values stay fixed: glibc stops adjusting them), and the free heap is
given back to the system (``malloc_trim``). With a C library other than glibc nothing is changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from trtfarm.precision.held import HeldWhileAny

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # glibc's malloc.h
KEPT_FREE = 2**31 - 1  # while a step runs, freed heap up to 2 GiB is kept for reuse (given back when it ends)
AFTER = {M_MMAP_MAX: 65536, M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20}  # glibc's default count;
# the largest mmap threshold its adjustment sets, and twice that to trim, as the adjustment keeps them


def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (``mallopt`` and ``malloc_trim`` as glibc defines them)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL(None)
    except (ValueError, OSError, AttributeError):  # no such name on this system, or no C library to open
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextlib.contextmanager
def reused_heap() -> Iterator[bool]:
    """Within the block, large blocks come from the heap and freed ones are kept for reuse (glibc only).

    Yields whether the allocator was tuned. Threads share one tuning, undone when the last block ends.
    """
    libc = _glibc()
    if libc is None:
        yield False
        return
    with TUNING.held():
        yield True


def _tune() -> None:
    libc = _glibc()
    libc.mallopt(M_TRIM_THRESHOLD, KEPT_FREE)
    libc.mallopt(M_MMAP_MAX, 0)


def _untune(_: None) -> None:
    libc = _glibc()
    for option, value in AFTER.items():
        libc.mallopt(option, value)
    libc.malloc_trim(0)


TUNING = HeldWhileAny(_tune, _untune)  # one for every thread of the process
