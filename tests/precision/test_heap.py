"""The precision step's process reuses the heap's pages for large buffers instead of new mappings (glibc only).

Counted as page faults (what the kernel does for a fresh mapping) in processes of their own, started with and without
the tuned environment, as the step's process is started (``child``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trtfarm.precision.heap import TUNABLES, tuned_environment

GLIBC = bool(os.confstr("CS_GNU_LIBC_VERSION")) if "CS_GNU_LIBC_VERSION" in os.confstr_names else False

# faults taken by ten 64 MiB buffers made and freed one after another
FAULTS = """
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(10):
    buffer = bytes([i]) * (64 << 20)
    del buffer
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env: dict[str, str]) -> int:
    return int(subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True,
                              env=env).stdout)


@pytest.mark.skipif(not GLIBC, reason="the allocator is tuned on glibc only")
def test_large_buffers_reuse_pages_in_a_process_started_tuned():
    plain = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    assert _faults(tuned_environment(plain)) * 3 < _faults(plain)  # one buffer's pages, reused nine times


def test_the_tuning_keeps_what_the_environment_sets_already():
    env = tuned_environment({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=5:glibc.malloc.arena_max=2", "X": "1"})
    assert env["X"] == "1"
    assert env["GLIBC_TUNABLES"].split(":") == ["glibc.malloc.mmap_max=5", "glibc.malloc.arena_max=2",
                                                f"glibc.malloc.trim_threshold={TUNABLES['glibc.malloc.trim_threshold']}"]
    assert tuned_environment({})["GLIBC_TUNABLES"].split(":") == [f"{k}={v}" for k, v in TUNABLES.items()]
