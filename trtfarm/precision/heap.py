"""Large buffers reused in the precision step's process, not mapped afresh each time: glibc's malloc, tuned.

A conversion serialises and parses the model many times (ModelOpt's ONNX shape inference, its model-size checks,
its saves; the gate's sessions): on a 50 MB model each is a new buffer of 50 MB or more. glibc gives a block that
large a mapping of its own (``mmap``) and unmaps it when it is freed, so the kernel faults in and zeroes every page
of every buffer afresh: 1.5 million page faults and 3 s of system CPU in the int8 step of a 50 MB MLP, a third of
the step's CPU (bench/precision_speed.py). In the step's process large blocks come from the heap instead
(``mmap_max`` 0) and freed memory stays there for the next block (``trim_threshold``): the same pages are reused, and
the faults fall to a sixth. What the step computes is unchanged, only where its memory comes from.

The step runs in a process of its own (``child``), so the tuning is given to that process when it starts, as glibc
reads it: ``GLIBC_TUNABLES`` in its environment. Nothing is changed in a running process, and nothing needs undoing:
glibc has no call that reads these settings back (``mallinfo2`` reports the heap's use, not its thresholds), so a
process that tuned itself could only restore values it guessed. A C library other than glibc ignores the variable.
"""

from __future__ import annotations

KEPT_FREE = 2**31 - 1  # freed heap up to 2 GiB is kept for reuse while the step runs (the process then exits)
TUNABLES = {"glibc.malloc.mmap_max": 0, "glibc.malloc.trim_threshold": KEPT_FREE}


def tuned_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with glibc's allocator tuned for the step (``TUNABLES``); tunables already set there are kept."""
    given = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    named = {t.split("=", 1)[0] for t in given}
    mine = [f"{name}={value}" for name, value in TUNABLES.items() if name not in named]
    return {**env, "GLIBC_TUNABLES": ":".join([*given, *mine])}
