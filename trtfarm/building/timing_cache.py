"""Shared timing caches: one object per (toolchain version, GPU model) in the store.

Pull with its ETag, build with it, then merge ours back with compare-and-swap: read the current object, ``combine``
ours into it with the toolchain's own API, write with ``IfMatch``; on a conflict re-read and retry with backoff; when
absent create with ``IfNoneMatch='*'``. No update is ever lost.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from trtfarm.store import Conflict, Store

Combine = Callable[[bytes, bytes], bytes]  # (current, ours) -> merged


@dataclass(frozen=True)
class Merged:
    """The cache object after our merge."""

    data: bytes
    attempts: int

    @property
    def bytes_after(self) -> int:
        """Size of the shared cache after our merge."""
        return len(self.data)


def pull_timing_cache(store: Store, key: str) -> bytes | None:
    """The current shared cache, or None when there is none yet."""
    blob = store.get(key)
    return blob.data if blob else None


def merge_timing_cache(store: Store, key: str, ours: bytes, combine: Combine, *, max_attempts: int = 50,
                       sleep: Callable[[float], None] = time.sleep) -> Merged:
    """Merge ``ours`` into the shared object with the compare-and-swap loop; raise after ``max_attempts``."""
    for attempt in range(1, max_attempts + 1):
        current = store.get(key)
        merged = combine(current.data, ours) if current else ours
        try:
            store.compare_and_swap(key, merged, current.etag if current else None)
            return Merged(merged, attempt)
        except Conflict:
            sleep(min(1.0, 0.01 * 2 ** min(attempt, 7)) * random.uniform(0.5, 1.5))
    raise Conflict(f"{key}: gave up merging the timing cache after {max_attempts} conflicting writers")


def tensorrt_combine(trt: ModuleType) -> Combine:
    """A ``Combine`` using TensorRT's ``ITimingCache.combine`` (same TensorRT version on both sides)."""

    def combine(current: bytes, ours: bytes) -> bytes:
        from trtfarm.toolchain.builder import _shared_logger

        config = trt.Builder(_shared_logger(trt)).create_builder_config()
        base = config.create_timing_cache(current)
        if not base.combine(config.create_timing_cache(ours), False):
            raise RuntimeError("ITimingCache.combine refused the caches (different TensorRT versions or devices)")
        return bytes(memoryview(base.serialize()))

    return combine
