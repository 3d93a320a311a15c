"""Build one plan and publish it for every target of its compatibility class.

``build_group`` is the per-target work of the design, in one call the flows wrap: pull the timing cache, build,
merge the cache back, publish plan + manifest for each target that shares this build.
"""

from __future__ import annotations

import shlex
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from trtfarm.fleet import Flavour
from trtfarm.manifest import (
    BuildInfo,
    Check,
    Manifest,
    ModelInfo,
    PlanInfo,
    PrecisionInfo,
    TargetInfo,
    TimingCacheInfo,
    Verification,
)
from trtfarm.matrix import ModelSource, TargetPlan
from trtfarm.profiles import Profile, profiles_json
from trtfarm.publish import publish_plan, read_manifest
from trtfarm.release import ReleaseRefused, move_release, pointer_key
from trtfarm.store import Store
from trtfarm.store.base import Progress
from trtfarm.timing_cache import cache_key, merge_timing_cache, pull_timing_cache, tensorrt_combine
from trtfarm.toolchain import BuildProgress, BuildResult, import_flavour, plan_from_onnx
from trtfarm.toolchain.engine import EngineRejected, deserialize_plan, device_memory_per_profile, timing_cache_entries

Status = Literal["built", "up-to-date", "skipped", "failed"]


@dataclass
class TargetOutcome:
    """What happened to one target in a run (the ``--json`` contract of ``trtfarm build``)."""

    target: str
    status: Status
    reason: str = ""
    manifest: str | None = None
    build_s: float | None = None
    plan_bytes: int | None = None
    verification: dict = field(default_factory=dict)
    release: str = ""

    def to_json(self) -> dict:
        """``{target, status, reason, manifest, ...}``."""
        return {"target": self.target, "status": self.status, "reason": self.reason, "manifest": self.manifest,
                "build_s": self.build_s, "plan_bytes": self.plan_bytes, "verification": self.verification,
                "release": self.release}


def reproduce_command(model: ModelSource, plan: TargetPlan, profiles: Sequence[Profile]) -> str:
    """The ``trtfarm build`` command that rebuilds this plan."""
    args = ["trtfarm", "build", str(model.path), "--name", model.name, "--target", plan.target.id]
    if model.precision.get("recipe", "fp32") != "fp32":
        args += ["--precision", model.precision["recipe"]]
    for p in profiles:
        args += [a for name, r in sorted(p.root.items()) for a in ("--profile", f"{name}={r.text()}")]
    return shlex.join(args)


def _timing(store: Store, plan: TargetPlan) -> tuple[bytes | None, str | None]:
    t = plan.target
    if t.toolchain.flavour is Flavour.tensorrt_rtx or not t.settings.timing_cache:
        return None, None
    key = cache_key(t.toolchain_label, t.gpu_key)
    return pull_timing_cache(store, key), key


def _cache_info(trt, result: BuildResult, key: str | None, before: bytes | None,
                after: bytes | None) -> TimingCacheInfo:
    if key is None or result.timing_cache is None:
        return TimingCacheInfo(used=False, reason=result.timing_cache_reason or "disabled for this target")
    return TimingCacheInfo(used=result.timing_cache_reason is None, reason=result.timing_cache_reason, key=key,
                           bytes_before=len(before) if before else 0, bytes_after=len(after) if after else None,
                           entries_before=timing_cache_entries(trt, before or b""),
                           entries_after=timing_cache_entries(trt, after))


def _engine_memory(trt, plan: TargetPlan, result: BuildResult) -> list[int] | None:
    """Device memory per profile, read from the engine when the build ran on the target GPU (TensorRT)."""
    if plan.target.toolchain.flavour is not Flavour.tensorrt:
        return None  # TensorRT-RTX builds ahead of time on a CPU: the figure comes from a GPU worker later
    try:
        return device_memory_per_profile(deserialize_plan(trt, result.plan_path.read_bytes()))
    except EngineRejected:
        return None


def _verification(model: ModelSource, plan: TargetPlan, result: BuildResult) -> Verification:
    t = plan.target
    header_ok = result.header_version is not None
    built = Check(status="passed" if header_ok else "failed",
                  detail=f"plan header: {t.toolchain.flavour.value} {result.header_version}" if header_ok
                  else "plan header not recognised", figures={"build_s": round(result.wall_s, 3)})
    how = "ahead-of-time on a CPU" if t.toolchain.flavour is Flavour.tensorrt_rtx else "without engine validation"
    engine = Check(status="pending", detail=f"engine: pending on {t.gpu.nvml_name} (built {how}; deserialisation, "
                                            "accuracy and latency need that GPU)")
    return Verification(onnx=_onnx_check(model), built=built, engine=engine)


def _onnx_check(model: ModelSource) -> Check:
    """The precision gate's verdict, as the manifest's ``onnx`` check."""
    p = model.precision
    if not p or p.get("recipe", "fp32") == "fp32":
        return Check(status="passed", detail="onnx.checker passed; fp32 recipe: no conversion, no accuracy gate")
    figures = {f["output"]: {k: f[k] for k in ("cosine_mean", "cosine_min", "max_abs", "max_rel")} | f["extra"]
               for f in (p.get("accuracy") or {}).get("figures", [])}
    return Check(status=p["gate"], detail=p["gate_detail"], figures=figures)


def _manifest(model: ModelSource, plan: TargetPlan, built_by: TargetPlan, result: BuildResult, profiles,
              cache: TimingCacheInfo, run_id: str | None, plan_info: PlanInfo) -> Manifest:
    t = plan.target
    return Manifest(
        model=ModelInfo(name=model.name, source_uri=model.source_uri, onnx_digest=model.onnx_digest,
                        graph_digest=model.graph_digest, exported_at=model.exported_at),
        precision=PrecisionInfo(recipe=model.precision.get("recipe", "fp32"),
                                converted_onnx_digest=model.plan_digest,
                                pinned_fp32_nodes=model.precision.get("pinned_fp32_nodes", []),
                                accuracy=model.precision.get("accuracy")),
        target=TargetInfo(target_id=t.id, gpu=t.gpu_key, gpu_name=t.gpu.nvml_name,
                          compute_capability=t.gpu.compute_capability, compat_class=t.compat_class,
                          flavour=t.toolchain.flavour.value, toolchain_version=t.toolchain.version,
                          hardware_compatibility_level=result.hardware_compatibility_level,
                          version_compatible="VERSION_COMPATIBLE" in result.flags,
                          refittable=any(f.startswith("REFIT") for f in result.flags), builder_flags=result.flags),
        build=BuildInfo(build_digest=plan.build_digest, profiles=profiles_json(profiles),
                        settings=t.settings.model_dump(mode="json"), wall_s=round(result.wall_s, 3),
                        built_for_target=built_by.target.id, timing_cache=cache, worker_host=socket.gethostname(),
                        flow_run_id=run_id, reproduce=reproduce_command(model, built_by, profiles)),
        plan=plan_info.model_copy(update={"header_version": result.header_version}),
        verification=_verification(model, plan, result),
    )


def build_group(store: Store, model: ModelSource, group: Sequence[TargetPlan], profiles: Sequence[Profile], *,
                progress: BuildProgress | None = None, upload_progress: Callable[[str], Progress] | None = None,
                run_id: str | None = None) -> list[TargetOutcome]:
    """Build the plan of ``group[0]`` once and publish it for every target in ``group`` (same build digest)."""
    lead = group[0]
    trt = import_flavour(lead.target.toolchain.flavour.value)
    before, key = _timing(store, lead)
    with tempfile.TemporaryDirectory(prefix="trtfarm-build-") as tmp:
        result = plan_from_onnx(trt, lead.target.toolchain.flavour.value, model.plan_input, profiles,
                                lead.target.settings, Path(tmp) / "model.plan", timing_cache=before,
                                progress=progress)
        after = None
        if key and result.timing_cache is not None:
            after = merge_timing_cache(store, key, result.timing_cache, tensorrt_combine(trt)).data
        cache = _cache_info(trt, result, key, before, after)
        memory = _engine_memory(trt, lead, result)
        outcomes = []
        for plan in group:
            def manifest_for(info: PlanInfo, plan: TargetPlan = plan) -> Manifest:
                info = info.model_copy(update={"device_memory_per_profile": memory})
                return _manifest(model, plan, lead, result, profiles, cache, run_id, info)

            up = upload_progress(plan.target.id) if upload_progress else None
            pub = publish_plan(store, plan.prefix, result.plan_path, manifest_for, up)
            shared = "" if plan is lead else f"shares the {plan.target.compat_class} build of {lead.target.id}"
            outcomes.append(TargetOutcome(
                plan.target.id, "built", shared if pub.created else "published concurrently by another worker",
                store.url(pub.manifest_key), pub.manifest.build.wall_s, pub.manifest.plan.bytes,
                {k: v.status for k, v in pub.manifest.verification},
                release_if_allowed(store, pub.manifest_key, pub.manifest, plan.target.release_on, run_id)))
    return outcomes


def release_if_allowed(store: Store, manifest_key: str, manifest: Manifest, release_on: str,
                       run_id: str | None) -> str:
    """Move the release pointer when the target's policy allows; say what happened."""
    try:
        move_release(store, manifest_key, manifest, release_on=release_on, by="trtfarm",
                     reason=f"built by flow run {run_id}" if run_id else "built by trtfarm build")
    except ReleaseRefused as refused:
        return str(refused)
    return f"released: {pointer_key(manifest)}"


def outcome_from_manifest(store: Store, plan: TargetPlan, manifest: Manifest) -> TargetOutcome:
    """An up-to-date target: its manifest already exists."""
    return TargetOutcome(plan.target.id, "up-to-date", f"build {plan.build_digest[:12]} already published",
                         store.url(plan.manifest_key), manifest.build.wall_s, manifest.plan.bytes,
                         {k: v.status for k, v in manifest.verification})


def triage(store: Store, plans: Sequence[TargetPlan]) -> tuple[dict[str, TargetOutcome], list[TargetPlan]]:
    """Split a run into finished outcomes (skipped, up to date) and the plans that still need a build."""
    done: dict[str, TargetOutcome] = {}
    todo = []
    for p in plans:
        if p.skip_reason:
            done[p.target.id] = TargetOutcome(p.target.id, "skipped", p.skip_reason)
        elif (existing := read_manifest(store, p.manifest_key)) is not None:
            done[p.target.id] = outcome_from_manifest(store, p, existing)
        else:
            todo.append(p)
    return done, todo
