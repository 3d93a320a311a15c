"""Engine-side calls of the toolchain seam: validity, deserialisation, device memory, timing-cache entries.

Everything here but ``timing_cache_entries`` needs a GPU that the plan supports. Written to the documented
TensorRT 11 API (``deserialize_cuda_engine`` returns None with the reason in the log; ``*_v2`` memory queries);
``get_engine_validity`` exists only in TensorRT-RTX.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from trtfarm.errors import UserInputError
from trtfarm.toolchain.trtlog import captured_log


class EngineRejected(UserInputError):
    """The runtime refused the plan (wrong GPU, toolchain or file); ``reasons`` are the runtime's own messages."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("; ".join(reasons) or "the runtime refused the plan without a message")


@dataclass(frozen=True)
class Validity:
    """TensorRT-RTX's verdict on a plan header, before loading it."""

    status: str  # VALID / SUBOPTIMAL / INVALID
    diagnostics: list[str]
    log: list[str]


def engine_validity(trt: ModuleType, header: bytes) -> Validity | None:
    """``Runtime.get_engine_validity`` on the plan's header (TensorRT-RTX only; None elsewhere)."""
    with captured_log(trt, builds=False) as (logger, log):
        runtime = trt.Runtime(logger)
        runtime.error_recorder = log.recorder
        if not hasattr(runtime, "get_engine_validity"):
            return None
        status, bits = runtime.get_engine_validity(header[: runtime.engine_header_size])
    flags = [d.name for d in _members(trt.EngineInvalidityDiagnostics) if int(bits) & int(d)]
    return Validity(status.name, flags, log.errors)


def _members(enum) -> list:
    return [getattr(enum, n) for n in dir(enum) if n.isupper()]


def deserialize_plan(trt: ModuleType, data: bytes, *, allow_host_code: bool = False):
    """Deserialise a plan into an engine; ``EngineRejected`` carries the runtime's reason."""
    with captured_log(trt, builds=False) as (logger, log):
        runtime = trt.Runtime(logger)
        runtime.error_recorder = log.recorder
        if allow_host_code:
            runtime.engine_host_code_allowed = True  # version-compatible plans embed host code
        engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise EngineRejected(log.errors)
    # The engine keeps its runtime alive: the bindings declare deserialize_cuda_engine with keep_alive<0, 1>. (An
    # attribute cannot carry it: ICudaEngine takes no new attributes, so setting one raised AttributeError.)
    return engine


def device_memory_per_profile(engine) -> list[int]:
    """Activation memory each context of each profile reserves (``get_device_memory_size_for_profile_v2``)."""
    return [int(engine.get_device_memory_size_for_profile_v2(i)) for i in range(engine.num_optimization_profiles)]


def timing_cache_entries(trt: ModuleType, blob: bytes | None) -> int | None:
    """Number of entries in a serialised timing cache (``ITimingCache.queryKeys``), None when unknown."""
    if not blob:
        return 0 if blob is not None else None
    with captured_log(trt) as (logger, log):
        builder = trt.Builder(logger)
        builder.error_recorder = log.recorder
        config = builder.create_builder_config()
        cache = config.create_timing_cache(blob)
    query = getattr(cache, "queryKeys", None)
    return len(query()) if cache is not None and query else None
