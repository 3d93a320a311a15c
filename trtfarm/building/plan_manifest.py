"""The manifest of a finished build, and the ``trtfarm build`` command that rebuilds its plan.

The manifest records the model, its precision step, the target, the build, the plan and its checks.

``build.py`` builds and publishes; this module only says what the manifest beside each plan holds. A plan shared by
the targets of one compatibility class gets one manifest per target: the engine checks ran on the GPU of the target
that built it (``built_by``), and the others' engine checks stay pending.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from trtfarm.building.device import build_device, served_gpus
from trtfarm.profiles.profile import Profile, profiles_json
from trtfarm.toolchain import BuildResult
from trtfarm.vocabulary.fleet import bindings_api_check
from trtfarm.vocabulary.manifest import (
    BuildInfo,
    Check,
    Manifest,
    ModelFile,
    ModelInfo,
    PlanInfo,
    PrecisionInfo,
    ServingImageInfo,
    TargetInfo,
    TimingCacheInfo,
    Verification,
)
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.targets import TargetWork


def reproduce_command(model: ModelSource, plan: TargetWork, profiles: Sequence[Profile]) -> str:
    """The ``trtfarm build`` command that rebuilds this plan."""
    args = ["trtfarm", "build", str(model.path), "--name", model.name, "--target", plan.target.id]
    if model.recipe_mode != "fp32":
        args += ["--precision", model.recipe_mode]
    for p in profiles:
        args += [a for name, r in sorted(p.root.items()) for a in ("--profile", f"{name}={r.text()}")]
    return shlex.join(args)


@dataclass
class EngineResult:
    """What the target GPU said about the plan (TensorRT builds run on it; RTX builds ran ahead of time)."""

    check: Check
    tactics: dict[str, str] | None = None
    tactics_digest: str | None = None
    memory: list[int] | None = None


def pending_engine(plan: TargetWork, why: str = "built ahead-of-time on a CPU") -> Check:
    """``engine: pending on <GPU>``: never a fabricated figure."""
    return Check(status="pending", detail=f"engine: pending on {plan.target.gpu.nvml_name} ({why}; "
                                          "deserialisation, accuracy and latency need that GPU)")


def _verification(model: ModelSource, plan: TargetWork, result: BuildResult, engine: Check,
                  determinism: dict) -> Verification:
    t = plan.target
    header_ok = result.header_version is not None
    built = Check(status="passed" if header_ok else "failed",
                  detail=f"plan header: {t.toolchain.flavour.value} {result.header_version}" if header_ok
                  else "plan header not recognised", figures={"build_s": round(result.wall_s, 3), **determinism})
    checked, how = bindings_api_check(t.toolchain.flavour, t.toolchain.version)
    api = Check(status="passed" if checked else "not_run", detail=how)
    return Verification(onnx=_onnx_check(model), built=built, engine=engine, api=api)


def _onnx_check(model: ModelSource) -> Check:
    """The precision gate's verdict, as the manifest's ``onnx`` check."""
    p = model.precision
    if not p or p.mode == "fp32":
        return Check(status="passed", detail="onnx.checker passed; fp32 recipe: no conversion, no accuracy gate")
    figures = {f.output: f.gate_figures() for f in (p.accuracy.figures if p.accuracy else [])}
    return Check(status=p.gate, detail=p.gate_detail, figures=figures)


def serving_images(plan: TargetWork) -> list[ServingImageInfo]:
    """The serving images the target's toolchain declares, as the manifest records them."""
    tc = plan.target.toolchain
    return [ServingImageInfo(image=s.image, flavour=(s.flavour or tc.flavour).value,
                             tensorrt_version=s.tensorrt_version) for s in tc.serving_images]


def build_manifest(model: ModelSource, plan: TargetWork, built_by: TargetWork, result: BuildResult, profiles,
                   cache: TimingCacheInfo, run_id: str | None, plan_info: PlanInfo, engine: EngineResult,
                   determinism: dict) -> Manifest:
    """The manifest of ``plan`` for a finished build (``built_by``: the target whose build made the bytes)."""
    t = plan.target
    return Manifest(
        model=ModelInfo(name=model.name, source_uri=model.source_uri, onnx_digest=model.onnx_digest,
                        graph_digest=model.graph_digest, exported_at=model.exported_at,
                        files=[ModelFile(name=n, sha256=d) for n, d in model.files]),
        precision=PrecisionInfo(recipe=model.recipe_mode, converted_onnx_digest=model.plan_digest,
                                pinned_fp32_nodes=model.precision.pinned_fp32_nodes if model.precision else [],
                                accuracy=model.precision.accuracy.model_dump()
                                if model.precision and model.precision.accuracy else None),
        target=TargetInfo(target_id=t.id, gpu=t.gpu_key, gpu_name=t.gpu.nvml_name,
                          compute_capability=t.gpu.compute_capability, compat_class=t.compat_class,
                          flavour=t.toolchain.flavour.value, toolchain_version=t.toolchain.version,
                          hardware_compatibility_level=result.hardware_compatibility_level,
                          version_compatible="VERSION_COMPATIBLE" in result.flags,
                          refittable=any(f.startswith("REFIT") for f in result.flags), builder_flags=result.flags,
                          serving_images=serving_images(plan), pci_ids=list(t.gpu.pci_ids), serves=served_gpus(plan),
                          mig=t.mig),
        build=BuildInfo(build_digest=plan.build_digest, profiles=profiles_json(profiles),
                        settings=t.settings.model_dump(mode="json"), wall_s=round(result.wall_s, 3),
                        built_for_target=built_by.target.id, timing_cache=cache, worker_host=socket.gethostname(),
                        flow_run_id=run_id, reproduce=reproduce_command(model, built_by, profiles),
                        device=build_device(built_by)),
        plan=plan_info.model_copy(update={"header_version": result.header_version, "tactics": engine.tactics,
                                          "tactics_digest": engine.tactics_digest,
                                          "device_memory_per_profile": engine.memory,
                                          "io": list(result.io) or None}),
        verification=_verification(model, plan, result, engine.check if plan is built_by else pending_engine(
            plan, f"plan shared with {built_by.target.id}, whose GPU ran the engine checks"
            if engine.check.status != "pending" else "built ahead-of-time on a CPU"), determinism),
    )
