"""The one module that executes plans: validation and timing on the target GPU (TensorRT, via Polygraphy).

Written to shared/reference/tensorrt.md and Polygraphy 0.53's API; it runs on GPU workers only (never here).
For each profile: run the plan (Polygraphy ``TrtRunner`` with that optimization profile) and the FP32 ONNX
(onnxruntime) on the same inputs at min/opt/max shapes and compare; time the plan at the opt shape after a warm-up;
when ``trtexec`` is on the worker, time the same plan and shapes with it and record the ratio. Then read the engine
inspector's JSON (tactics), device memory per profile and how many contexts fit in free GPU memory.
TensorRT-RTX plans are not executed here: Polygraphy's runner loads ``tensorrt``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from trtfarm.onnxfile import load_model
from trtfarm.precision.output_meaning import output_meanings
from trtfarm.precision.recipe import Recipe
from trtfarm.profiles.profile import Profile, format_shape
from trtfarm.runtime.loader import contexts_that_fit
from trtfarm.scratch import scratch_dir
from trtfarm.toolchain.engine import device_memory_per_profile
from trtfarm.validation.compare import PointComparison, compare_point, inputs_for_shapes, profile_points
from trtfarm.validation.latency import LatencyStats, latency_stats, stats_from_trtexec_times
from trtfarm.validation.tactics import tactics_from_inspector


@dataclass
class EngineValidation:
    """Everything measured on the target GPU."""

    points: list[PointComparison]
    latency: dict[int, LatencyStats]
    trtexec: dict[int, LatencyStats] = field(default_factory=dict)
    tactics: dict[str, str] = field(default_factory=dict)
    memory_per_profile: list[int] = field(default_factory=list)
    contexts: list[int] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """Every comparison that missed its thresholds."""
        return [f"profile {p.profile} {p.point}: {f}" for p in self.points for f in p.failures]


def _trtexec_stats(plan: Path, shapes: dict[str, list[int]], batch: int, iterations: int) -> LatencyStats | None:
    exe = shutil.which("trtexec")
    if exe is None:
        return None
    spec = ",".join(f"{n}:{format_shape(s)}" for n, s in shapes.items())
    with scratch_dir("trtfarm-latency-") as tmp:
        times = tmp / "times.json"
        subprocess.run([exe, f"--loadEngine={plan}", f"--shapes={spec}", f"--iterations={iterations}",
                        f"--exportTimes={times}"], check=True, capture_output=True, timeout=600)
        return stats_from_trtexec_times(json.loads(times.read_text()), batch)


def engine_tactics(plan: Path) -> dict[str, str]:
    """Per-layer tactics of a plan (deserialise + engine inspector; no execution)."""
    import tensorrt as trt
    from polygraphy.backend.trt import EngineFromBytes

    engine = EngineFromBytes(plan.read_bytes())()
    return tactics_from_inspector(engine.create_engine_inspector().get_engine_information(
        trt.LayerInformationFormat.JSON))


def validate_engine(plan: Path, onnx_fp32: Path, profiles: list[Profile], recipe: Recipe, *, warmup: int = 10,
                    iterations: int = 100, heldout: dict | None = None) -> EngineValidation:
    """Compare, time and inspect ``plan`` on this worker's GPU (held-out samples fitted to each shape if given)."""
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    engine = EngineFromBytes(plan.read_bytes())()
    model = load_model(onnx_fp32)
    meanings = output_meanings(model)  # the gate's kinds of output: the plan is judged by the same figures
    result = EngineValidation([], {})
    with OnnxrtRunner(SessionFromOnnx(str(onnx_fp32), providers=["cpu"])) as reference:
        for index, profile in enumerate(profiles):
            with TrtRunner(engine, optimization_profile=index) as runner:
                for point, shapes in profile_points(profile):
                    feed = inputs_for_shapes(model, shapes, seed=index, heldout=heldout)
                    result.points.append(compare_point(index, point, shapes, reference.infer(feed),
                                                       runner.infer(feed), recipe, meanings))
                opt = dict(profile_points(profile))["opt"]
                feed, batch = inputs_for_shapes(model, opt, heldout=heldout), next(iter(opt.values()))[0]
                for _ in range(warmup):
                    runner.infer(feed)
                samples = []
                for _ in range(iterations):
                    runner.infer(feed)
                    samples.append(runner.last_inference_time() * 1000.0)
                result.latency[index] = latency_stats(samples, batch)
                if (stats := _trtexec_stats(plan, opt, batch, iterations)) is not None:
                    result.trtexec[index] = stats
    result.tactics = engine_tactics(plan)
    result.memory_per_profile = device_memory_per_profile(engine)
    result.contexts = contexts_that_fit(_free_gpu_bytes(), result.memory_per_profile)
    return result


def _free_gpu_bytes() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free)
    finally:
        pynvml.nvmlShutdown()
