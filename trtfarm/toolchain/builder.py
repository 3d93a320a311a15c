"""ONE plan builder over the TensorRT-family Python API, parameterised by the flavour module.

``tensorrt`` (10.x/11.x) and ``tensorrt_rtx`` share this code: parse (every parser error, with node name and
operator), optimization profiles, workspace limit, optimization level, TF32, hardware compatibility level,
refit/strip flags, a progress monitor, the timing cache, and a captured log so a failed build says why.
Written to the documented 11.x API (strongly typed networks; no FP16/INT8 flags, no calibrators).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Protocol

from trtfarm import interrupt
from trtfarm.errors import InfrastructureError, UserInputError, scratch_failure
from trtfarm.machine.header import read_plan_header
from trtfarm.profiles.profile import Profile
from trtfarm.toolchain.trtlog import Capture, captured_log, parser_quiet, printed_to_stderr
from trtfarm.vocabulary.fleet import BuilderSettings, RefitMode
from trtfarm.vocabulary.manifest import TensorIO

RTX_NO_TIMING_CACHE = ("none: TensorRT-RTX has no timing cache (its cache calls are no-ops since 1.2); none is pulled, "
                       "attached or merged")
REFIT_FLAGS = {RefitMode.refit: "REFIT", RefitMode.refit_identical: "REFIT_IDENTICAL",
                RefitMode.refit_individual: "REFIT_INDIVIDUAL"}


class BuildProgress(Protocol):
    """Receives the builder's IProgressMonitor callbacks (from the builder's threads)."""

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        """A phase began."""

    def step_complete(self, name: str, step: int) -> bool:
        """A step finished; return False to cancel the build."""

    def phase_finish(self, name: str) -> None:
        """A phase ended."""


@dataclass(frozen=True)
class ParserIssue:
    """One ONNX parser error."""

    code: str
    desc: str
    node: int
    node_name: str
    node_operator: str

    def __str__(self) -> str:
        where = f"node {self.node} {self.node_name!r} ({self.node_operator})" if self.node >= 0 else "model"
        return f"{where}: {self.code}: {self.desc}"


MAX_SHOWN_ISSUES = 10


class OnnxParseError(UserInputError):
    """The parser rejected the model; ``issues`` holds every error it reported."""

    def __init__(self, path: Path, issues: list[ParserIssue]) -> None:
        self.issues = issues
        ops: dict[str, int] = {}
        for i in issues:
            if i.node_operator:
                ops[i.node_operator] = ops.get(i.node_operator, 0) + 1
        at = f" at {', '.join(f'{op} x{n}' for op, n in ops.items())}" if ops else ""
        shown = issues[:MAX_SHOWN_ISSUES]
        lines = "\n".join(f"  - {i}" for i in shown) or "  - (the parser gave no reason)"
        if len(issues) > len(shown):
            lines += f"\n  - ... and {len(issues) - len(shown)} more"
        super().__init__(f"{path}: the ONNX parser rejected the model ({len(issues)} error(s){at}):\n{lines}\n"
                         "Fix: check the file is a complete ONNX export; for an unsupported operator, change the "
                         "export opset, rewrite the op in supported primitives, or add a plugin.")


class BuildFailed(UserInputError):
    """``build_serialized_network`` returned None; the message carries the builder's own errors."""


class BuilderOutOfMemory(InfrastructureError):
    """The parser or builder ran out of host or GPU memory: the machine's state, not the model, so it is retried."""

    service = "the build machine's memory"


# What TensorRT and TensorRT-RTX log when an allocation fails (seen here under a memory limit: "std::bad_alloc",
# "Error Code 2: OutOfMemory (Requested size was N bytes.)", "Resource temporarily unavailable" for a thread; on
# GPUs: "Requested amount of GPU memory (N bytes) could not be allocated", "Cuda Runtime (out of memory)").
_OUT_OF_MEMORY = re.compile(r"out ?of ?memory|std::bad_alloc|requested amount of gpu memory|could not be allocated|"
                            r"cudaErrorMemoryAllocation|failed to allocate|allocation failed|"
                            r"resource temporarily unavailable", re.IGNORECASE)


def out_of_memory(onnx_path: Path, flavour: str, step: str, errors: Sequence[str]) -> BuilderOutOfMemory | None:
    """A ``BuilderOutOfMemory`` when the logged errors say an allocation failed; None for the model's own errors."""
    short = [m for m in errors if _OUT_OF_MEMORY.search(m)]
    if not short:
        return None
    return BuilderOutOfMemory(f"{onnx_path}: the {flavour} {step} ran out of memory on {socket.gethostname()}: "
                              f"{short[0].strip()[:300]}. Retried; if it persists, free the GPU and host memory other "
                              "processes hold, lower workspace_mib, or build on a machine with more memory")


@dataclass
class BuildResult:
    """A finished build."""

    plan_path: Path
    plan_bytes: int
    header_version: str | None
    wall_s: float
    flags: list[str]
    hardware_compatibility_level: str
    timing_cache: bytes | None
    timing_cache_reason: str | None
    io: list[TensorIO] = field(default_factory=list)


def _monitor(trt: ModuleType, sink: BuildProgress | None):
    """The builder's progress monitor; installed even without a display (``sink`` None), so a stop cancels."""
    class Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):  # noqa: D102 - TensorRT callback
            if sink is not None:
                sink.phase_start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name, step):  # noqa: D102 - TensorRT callback
            return not interrupt.STOP.is_set() and (sink is None or bool(sink.step_complete(phase_name, step)))

        def phase_finish(self, phase_name):  # noqa: D102 - TensorRT callback
            if sink is not None:
                sink.phase_finish(phase_name)

    return Monitor()


def _network(trt: ModuleType, builder):
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return builder.create_network(1 << int(flag) if flag is not None else 0)


def _parse(trt: ModuleType, network, logger, onnx_path: Path) -> None:
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(onnx_path))
    if ok:
        return
    issues = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        issues.append(ParserIssue(str(getattr(e.code(), "name", e.code())), e.desc(), int(e.node()),
                                  e.node_name() or "", e.node_operator() or ""))
    oom = out_of_memory(onnx_path, trt.__name__, "ONNX parser", [i.desc for i in issues])
    raise oom or OnnxParseError(onnx_path, issues)


def network_io(network) -> list[TensorIO]:
    """The network's inputs then outputs as the parser left them (dtype by name: enum values change)."""
    tensors = [("input", network.get_input(i)) for i in range(network.num_inputs)]
    tensors += [("output", network.get_output(i)) for i in range(network.num_outputs)]
    return [TensorIO(name=t.name, mode=mode, dtype=str(getattr(t.dtype, "name", t.dtype)).rsplit(".", 1)[-1],
                     shape=[int(d) for d in t.shape]) for mode, t in tensors]


def _configure(trt: ModuleType, builder, config, settings: BuilderSettings) -> list[str]:
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mib << 20)
    config.builder_optimization_level = settings.optimization_level
    level = settings.hardware_compatibility.name.upper()
    config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, level)
    if settings.detailed_profiling:
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    flags = []
    if settings.tf32:
        flags.append("TF32")
    else:
        config.clear_flag(trt.BuilderFlag.TF32)
    if settings.refit is not RefitMode.none:
        flags.append(REFIT_FLAGS[settings.refit])
    if settings.strip_plan:
        flags.append("STRIP_PLAN")
    for name in flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    return sorted(flags)


def _add_profiles(builder, config, network, profiles: Sequence[Profile]) -> None:
    dynamic = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic_names = [t.name for t in dynamic if any(d < 0 for d in t.shape)]
    shape_names = [t.name for t in dynamic if t.is_shape_tensor]
    if (dynamic_names or shape_names) and not profiles:
        said = [f"inputs {dynamic_names} have dynamic dimensions"] if dynamic_names else []
        said += [f"shape tensors {shape_names} need the min/opt/max of their values"] if shape_names else []
        raise UserInputError(f"{' and '.join(said)} but no optimization profile was given (the builder: \"Network "
                             "has dynamic or shape inputs, but no optimization profile has been defined\"); add "
                             "--profile INPUT=MIN:OPT:MAX for each (a shape tensor's values: NAME=1,4:3,4:3,4), or "
                             "profiles: in farm.yaml")
    known = {t.name: t for t in dynamic}
    for index, profile in enumerate(profiles):
        p = builder.create_optimization_profile()
        for name, r in profile.root.items():
            if name not in known:
                raise UserInputError(f"profile {index}: the model has no input {name!r}; its inputs are "
                                     f"{sorted(known)}")
            if r.values != (name in shape_names):
                raise UserInputError(f"profile {index}: input {name!r} " + (
                    "is a shape tensor: give its values, e.g. --profile {name}=1,4:3,4:3,4" if not r.values else
                    "is not a shape tensor: give its shapes MIN:OPT:MAX, e.g. 1x16:16x128:32x512"))
            if r.values:  # a shape tensor's min/opt/max values (TensorRT: setShapeValues)
                p.set_shape_input(name, r.min, r.opt, r.max)
            else:
                p.set_shape(name, r.min, r.opt, r.max)
        if config.add_optimization_profile(p) < 0:
            raise UserInputError(f"profile {index} was rejected as invalid: {profile.to_json()}")


def _timing_cache(config, blob: bytes | None, use: bool, flavour: str) -> tuple[object | None, str | None]:
    if flavour == "tensorrt_rtx":
        return None, RTX_NO_TIMING_CACHE
    if not use:
        return None, "disabled for this target (timing_cache: false)"
    cache = config.create_timing_cache(blob or b"")
    if not config.set_timing_cache(cache, False):
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, False)
        return cache, "the shared cache did not match this toolchain/GPU and was ignored"
    return cache, None


_PROFILE_WORDS = re.compile(r"profile|kOPT|kMIN|kMAX|shape constraint|dimensions with name|must be equal|"
                            r"reshap|broadcast|shape input|dynamic", re.IGNORECASE)
_INTERNAL_WORDS = re.compile(r"assert|internal error|unexpected|should never|Error Code 1\b|Error Code 2\b",
                             re.IGNORECASE)


def build_fix(errors: Sequence[str]) -> str:
    """The fix that fits what the builder logged: a profile against the model's shapes, or its own failure."""
    if any(_PROFILE_WORDS.search(m) for m in errors):
        return ("check the optimization profiles against the model's shape constraints named above (min/opt/max "
                "of each input, and of each shape tensor's values)")
    if any(_INTERNAL_WORDS.search(m) for m in errors):
        return ("the builder stopped on its own internal error, not on an input trtfarm can name; the plain builder "
                "fails the same way. Try another optimization_level or toolchain version for this target, and "
                "report the model to NVIDIA")
    return "the builder's messages above name what it could not build; change the model or the settings they name"


def plan_from_onnx(trt: ModuleType, flavour: str, onnx_path: Path, profiles: Sequence[Profile],
                   settings: BuilderSettings, plan_path: Path, *, timing_cache: bytes | None = None,
                   progress: BuildProgress | None = None) -> BuildResult:
    """Parse ``onnx_path``, build a plan with ``settings`` and ``profiles``, write it to ``plan_path``."""
    with captured_log(trt) as (logger, log):
        return _build(trt, flavour, logger, log, onnx_path, profiles, settings, plan_path, timing_cache, progress)


def _build(trt, flavour, logger, log: Capture, onnx_path, profiles, settings, plan_path, timing_cache,
           progress) -> BuildResult:
    with interrupt.deferred(), printed_to_stderr():  # a stop in here cancels the build (the monitor), then raises
        builder = trt.Builder(logger)
        network = _network(trt, builder)
        with parser_quiet(trt, logger):  # its errors come back from the parser itself (OnnxParseError)
            _parse(trt, network, logger, Path(onnx_path))
        # Set once the network exists: a parsed network that holds a Python recorder crashed TensorRT-RTX 1.7
        # when it was freed. The builder's own errors (a bad profile, out of memory) come through it.
        builder.error_recorder = log.recorder
        io = network_io(network)
        config = builder.create_builder_config()
        flags = _configure(trt, builder, config, settings)
        _add_profiles(builder, config, network, profiles)
        cache, cache_reason = _timing_cache(config, timing_cache, settings.timing_cache, flavour)
        config.progress_monitor = _monitor(trt, progress)
        start = time.perf_counter()
        plan = builder.build_serialized_network(network, config)
        wall = time.perf_counter() - start
    if plan is None:
        if oom := out_of_memory(onnx_path, flavour, "builder", log.errors):
            raise oom
        reasons = "\n".join(f"  - {m}" for m in log.errors) or "  - (no error was logged)"
        raise BuildFailed(f"{onnx_path}: the {flavour} builder failed:\n{reasons}\nFix: {build_fix(log.errors)}")
    try:
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        with open(plan_path, "wb") as f:
            f.write(memoryview(plan))
    except OSError as err:  # TMPDIR full or read-only: the scratch plan is removed with its folder
        raise scratch_failure(err, f"the {plan.nbytes:,}-byte plan", plan_path.parent) from err
    header = read_plan_header(plan_path)
    new_cache = bytes(memoryview(cache.serialize())) if cache is not None else None
    return BuildResult(plan_path, plan.nbytes, header.version, wall, flags,
                       settings.hardware_compatibility.name.upper(), new_cache, cache_reason, io)
