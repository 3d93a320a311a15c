"""Shared timing caches: one object per exact TensorRT build, GPU model and cache-relevant builder flags.

TensorRT's caches depend on the device, the exact TensorRT build and some builder flags; ``ITimingCache.combine``
needs the same version on both sides, and merging caches of different devices is documented as unsafe. So the key
(``layout_shared.timing_cache_key``) carries the installed version, the GPU and its compute capability, and a digest of
``cache_flags``. TensorRT-RTX has no timing cache: its builds never pull, attach or merge one.

Pull with its ETag, build with it, publish the plan, then merge ours back with compare-and-swap: read the current
object, ``combine`` ours into it with the toolchain's own API, write with ``IfMatch``; on a conflict re-read and retry
with backoff; when absent create with ``IfNoneMatch='*'``. No update is ever lost. The merge is best effort: a refused
or contended merge is reported and never costs the published build.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from trtfarm.errors import MismatchError
from trtfarm.identity import canonical_json
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.fleet import BuilderSettings

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


class TimingCacheRefused(MismatchError):
    """``ITimingCache.combine`` refused the shared cache (another TensorRT build or device, or damaged bytes)."""


def cache_flags(settings: BuilderSettings) -> dict[str, str]:
    """The builder flags a timing cache depends on, by TensorRT's names: TF32, refit mode, hardware compatibility."""
    return {"TF32": "on" if settings.tf32 else "off", "refit": settings.refit.value.upper(),
            "hardware_compatibility_level": settings.hardware_compatibility.name.upper()}


def cache_flags_digest(settings: BuilderSettings) -> str:
    """sha256 of ``cache_flags`` as canonical JSON: the last part of a shared cache's key."""
    return hashlib.sha256(canonical_json(cache_flags(settings))).hexdigest()


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
        from trtfarm.toolchain.trtlog import captured_log

        with captured_log(trt) as (logger, log):
            builder = trt.Builder(logger)
            builder.error_recorder = log.recorder
            config = builder.create_builder_config()
        try:  # damaged bytes: the bindings raise (pybind11 turns TensorRT's exceptions into RuntimeError)
            base = config.create_timing_cache(current)
            other = config.create_timing_cache(ours)
            merged = base is not None and other is not None and base.combine(other, False)
        except RuntimeError as err:
            raise TimingCacheRefused(f"ITimingCache.combine refused the shared cache: {err}") from err
        if not merged:
            raise TimingCacheRefused("ITimingCache.combine refused the shared cache (another TensorRT build or "
                                     "device wrote it, or its bytes are damaged)")
        return bytes(memoryview(base.serialize()))

    return combine
