"""While a precision step runs, large buffers reuse the heap's pages instead of new mappings (glibc only).

Counted as page faults (what the kernel does for a fresh mapping) in a process of its own: the allocator's settings
are the process's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trtfarm.precision import heap

GLIBC = bool(os.confstr("CS_GNU_LIBC_VERSION")) if "CS_GNU_LIBC_VERSION" in os.confstr_names else False

# faults taken by ten 64 MiB buffers made and freed one after another, outside and inside the block
FAULTS = """
import resource
from trtfarm.precision.heap import reused_heap

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(10):
        buffer = bytes([i]) * (64 << 20)
        del buffer
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

outside = faults()
with reused_heap() as tuned:
    inside = faults()
after = faults()
print(tuned, outside, inside, after)
"""


@pytest.mark.skipif(not GLIBC, reason="the allocator is tuned on glibc only")
def test_large_buffers_reuse_pages_within_the_block_and_are_mapped_again_after():
    done = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    tuned, outside, inside, after = done.stdout.split()
    assert tuned == "True"
    assert int(inside) * 3 < int(outside)  # one buffer's pages, reused nine times
    assert int(after) * 3 > int(outside)  # mapped afresh again once the block ends


def test_blocks_nest_and_threads_share_one_tuning():
    with heap.reused_heap() as outer:
        with heap.reused_heap() as inner:
            assert inner == outer == GLIBC
            assert heap.TUNING.count == (2 if GLIBC else 0)
        assert heap.TUNING.count == (1 if GLIBC else 0)
    assert heap.TUNING.count == 0
