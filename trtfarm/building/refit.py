"""Refit eligibility: which released plans can take a new export's weights, and why the others need a full build.

A target is refitted when its released plan (the release pointer's manifest) was built refittable, from the same
graph (equal graph digests: the exports differ only in initializer values), for the FP32 recipe, with the same
toolchain and settings. Anything else goes through a full build, and the decision says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trtfarm.errors import UserInputError
from trtfarm.profiles.profile import Profile
from trtfarm.publishing.publish import publish_plan, read_manifest
from trtfarm.publishing.release import read_pointer
from trtfarm.scratch import scratch_dir
from trtfarm.store import Store
from trtfarm.toolchain import BuildResult
from trtfarm.vocabulary.manifest import Lineage, Manifest, PlanInfo, TimingCacheInfo
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.target_outcome import TargetOutcome
from trtfarm.vocabulary.targets import TargetWork


@dataclass(frozen=True)
class RefitDecision:
    """``refit`` (with the released manifest to refit) or ``build`` (with the reason a refit will not do)."""

    target: str
    action: Literal["refit", "build"]
    reason: str
    parent_manifest: str | None = None
    parent: Manifest | None = None  # the manifest at ``parent_manifest``, as read for the decision


def refit_decision(store: Store, model: ModelSource, plan: TargetWork, profiles: list[dict]) -> RefitDecision:
    """Decide for one target of a new export whether its released plan can be refitted with the export's weights.

    ``profiles`` are the new export's (``profiles_json``): a plan built for other profiles is rebuilt. The pointer is
    the one planning read (``plan.pointer``) when it did.
    """
    tid = plan.target.id
    pointer = plan.pointer.pointer if plan.pointer else read_pointer(store, plan.release_key)[0]
    if pointer is None:
        return RefitDecision(tid, "build", "no released plan to refit")
    parent = read_manifest(store, pointer.manifest)
    if parent is None:
        return RefitDecision(tid, "build", f"the release pointer names {pointer.manifest}, which is gone")
    if parent.model.graph_digest != model.graph_digest:
        return RefitDecision(tid, "build", f"graph changed since the released plan (graph digest "
                                           f"{parent.model.graph_digest[:12]} -> {model.graph_digest[:12]}); a refit "
                                           "needs the same graph")
    if not parent.target.refittable:
        return RefitDecision(tid, "build", "the released plan was built without a refit flag (set refit: "
                                           "refit_identical in gpu_targets.yaml to refit next time)")
    recipe = model.recipe_mode
    if parent.precision.recipe != "fp32" or recipe != "fp32":
        return RefitDecision(tid, "build", f"precision {recipe}: new weights need a new precision step (scales, "
                                           "pinned nodes), so the plan is rebuilt")
    if parent.build.settings != plan.target.settings.model_dump(mode="json") or \
            parent.target.toolchain_version != plan.target.toolchain.version:
        return RefitDecision(tid, "build", "builder settings or toolchain changed since the released plan")
    if parent.build.profiles != profiles:
        return RefitDecision(tid, "build", "optimization profiles changed since the released plan")
    if parent.model.onnx_digest == model.onnx_digest:
        return RefitDecision(tid, "build", "the released plan already has these weights")
    return RefitDecision(tid, "refit", f"same graph, new weights: refit of {pointer.manifest}", pointer.manifest,
                         parent)


def refit_and_publish(store: Store, model: ModelSource, plan: TargetWork, parent_key: str, profiles: list[Profile],
                      run_id: str | None = None, refit: Callable | None = None, signer=None,
                      parent: Manifest | None = None, release_key: str | None = None) -> TargetOutcome:
    """Refit the released plan ``parent_key`` with ``model``'s weights and publish it as this export's plan.

    The plan is checked as a build would be and published under the target's key for this export; its manifest
    names the parent (``lineage``) and keeps the parent's tactics; ``signer`` signs it as a build would. ``refit``
    is the toolchain seam (``trtfarm.toolchain.refitter.refit_plan``, GPU only); it raises ``RefitUnavailable``
    where the engine cannot load. ``parent``: the manifest at ``parent_key`` as planning read it (else it is read).
    """
    from trtfarm.building.build import attestation, engine_result
    from trtfarm.building.plan_manifest import build_manifest
    from trtfarm.building.release_move import outcome_from_manifest, release_if_allowed
    from trtfarm.toolchain import import_flavour, read_plan_header
    from trtfarm.toolchain.refitter import refit_plan

    parent = parent or read_manifest(store, parent_key)
    if parent is None:
        raise UserInputError(f"{store.url(parent_key)}: the plan to refit is gone")
    trt = import_flavour(plan.target.toolchain.flavour.value)
    with scratch_dir("trtfarm-refit-") as tmp:
        old = tmp / "parent.plan"
        store.download_file(parent.plan.key, old, sha256=parent.plan.sha256)
        start = time.perf_counter()
        data = (refit or refit_plan)(trt, old.read_bytes(), model.plan_input)
        wall = time.perf_counter() - start
        path = Path(tmp) / "model.plan"
        path.write_bytes(data)
        result = BuildResult(path, len(data), read_plan_header(path).version, wall, parent.target.builder_flags,
                             parent.target.hardware_compatibility_level, None, "refit: nothing was timed")
        engine = engine_result(store, model, plan, profiles, result)
        cache = TimingCacheInfo(used=False, reason="refit: no build, so no tactics were timed")

        def manifest_for(info: PlanInfo) -> Manifest:
            m = build_manifest(model, plan, plan, result, profiles, cache, run_id, info, engine, {})
            keep = {"tactics_digest": parent.plan.tactics_digest, "tactics": parent.plan.tactics,
                    "io": parent.plan.io}  # same graph: the parent's I/O tensors
            reproduce = f"{m.build.reproduce}  # or refit {parent_key} with this ONNX (trtfarm farm run --refit)"
            return m.model_copy(update={"lineage": Lineage(parent_manifest=parent_key),
                                        "plan": m.plan.model_copy(update=keep),
                                        "build": m.build.model_copy(update={"reproduce": reproduce})})

        attest = attestation(store, model, plan, signer, release_key=release_key)
        pub = publish_plan(store, plan.prefix, path, manifest_for, attest=attest, absent=plan.manifest_absent)
    outcome = outcome_from_manifest(store, plan, pub.manifest, status="built",
                                    reason=f"refitted from {parent_key} in {wall:.2f} s (no rebuild)")
    outcome.release = release_if_allowed(store, pub.manifest_key, pub.manifest, plan.target.release_on, run_id,
                                         model.trial, plan.pointer, signer, plan.promotion,
                                         override=model.release_override)
    return outcome
