"""Build one plan and publish it for every target of its compatibility class.

``build_group`` is the per-target work of the design, in one call the flows wrap: pull the timing cache, build,
publish plan + manifest for each target that shares this build, then merge the cache back (best effort: a merge that
fails is a warning on the outcomes, never a reason to lose the published build).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from trtfarm import interrupt
from trtfarm.building.plan_manifest import EngineResult, build_manifest, pending_engine
from trtfarm.building.release_move import outcome_from_manifest, release_if_allowed
from trtfarm.building.timing_cache import (
    TimingCacheRefused,
    cache_flags_digest,
    merge_timing_cache,
    pull_timing_cache,
    tensorrt_combine,
)
from trtfarm.errors import StoreError, UserInputError
from trtfarm.identity import sha256_file
from trtfarm.layout_shared import timing_cache_key
from trtfarm.modelfile import verified
from trtfarm.profiles.profile import Profile
from trtfarm.publishing.attest import Attestation
from trtfarm.publishing.provenance import BuildContext, provenance_bytes, provenance_statement
from trtfarm.publishing.publish import publish_plan, read_manifest
from trtfarm.scratch import scratch_dir
from trtfarm.signing.keys import key_hint
from trtfarm.store import Store
from trtfarm.store.base import Progress
from trtfarm.toolchain import BuildProgress, BuildResult, import_flavour, plan_from_onnx
from trtfarm.toolchain.engine import timing_cache_entries
from trtfarm.vocabulary.fleet import Flavour
from trtfarm.vocabulary.manifest import (
    Manifest,
    PlanInfo,
    TimingCacheInfo,
)
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.target_outcome import TargetOutcome
from trtfarm.vocabulary.targets import TargetWork
from trtfarm.workers.built_by import this_worker

if TYPE_CHECKING:
    from trtfarm.signing.keys import Signer

PUBLISH_THREADS = 8  # targets sharing one build publish at once: their store requests overlap
log = logging.getLogger("trtfarm.build")


def _timing(store: Store, plan: TargetWork, trt) -> tuple[bytes | None, str | None]:
    """The shared cache and its key: by the installed toolchain's exact build, the GPU and the cache-relevant flags.

    TensorRT-RTX has none (its cache calls are no-ops): nothing is pulled, attached or merged for its builds.
    """
    t = plan.target
    if t.toolchain.flavour is Flavour.tensorrt_rtx or not t.settings.timing_cache:
        return None, None
    key = timing_cache_key(t.toolchain.flavour.value, str(trt.__version__), t.gpu_key, t.gpu.compute_capability,
                           cache_flags_digest(t.settings))
    return pull_timing_cache(store, key), key


def _cache_info(trt, result: BuildResult, key: str | None, before: bytes | None) -> TimingCacheInfo:
    """The cache around this build: the shared one it started from, and the builder's own after the build."""
    if key is None or result.timing_cache is None:
        return TimingCacheInfo(used=False, reason=result.timing_cache_reason or "disabled for this target")
    after = result.timing_cache
    return TimingCacheInfo(used=result.timing_cache_reason is None, reason=result.timing_cache_reason, key=key,
                           bytes_before=len(before) if before else 0, bytes_after=len(after),
                           entries_before=timing_cache_entries(trt, before or b""),
                           entries_after=timing_cache_entries(trt, after))


def merge_after_publish(store: Store, trt, key: str | None, result: BuildResult) -> str:
    """Merge the build's cache into the shared one, after its plan is published; a warning when that fails, else ''.

    Best effort: ``combine`` refusing the shared cache, 50 conflicting writers, or the store failing cost the next
    builds their head start, never this finished build.
    """
    if key is None or result.timing_cache is None:
        return ""
    try:
        merge_timing_cache(store, key, result.timing_cache, tensorrt_combine(trt))
    except (TimingCacheRefused, StoreError) as err:
        warning = f"timing cache not merged into {key} (the plan is published): {err}"
        log.warning("%s", warning)
        return warning
    return ""


def engine_result(store: Store, model: ModelSource, plan: TargetWork, profiles, result: BuildResult) -> EngineResult:
    """Validate and time the plan on this GPU (TensorRT targets); otherwise the check stays pending."""
    t = plan.target
    if t.toolchain.flavour is not Flavour.tensorrt:
        return EngineResult(pending_engine(plan))
    from trtfarm.validation.engine_gpu import validate_engine
    from trtfarm.validation.summary import engine_check

    v = validate_engine(result.plan_path, model.path, list(profiles), engine_recipe(model),
                        heldout=heldout_samples(model))
    check, tactics, digest = engine_check(v, t.gpu.nvml_name, released_manifest(store, plan),
                                          t.max_p99_increase)
    return EngineResult(check, tactics, digest, v.memory_per_profile)


def heldout_samples(model: ModelSource) -> dict | None:
    """The inputs the engine check feeds: the held-out file the run was given, else None (generated inputs).

    The file is ``--heldout``'s or farm.yaml's (``ModelSource.heldout``), else ``heldout.npz`` beside the model (an
    export a worker fetched whole, whose planning saw only its spec).
    """
    path = model.heldout or model.path.with_name("heldout.npz")
    if not path.is_file():
        return None
    import numpy as np

    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def engine_recipe(model: ModelSource):
    """The tolerances an engine is held to: the recipe's, or for fp32 the FP16-level defaults (TF32 is on)."""
    from trtfarm.precision.recipe import DEFAULT_THRESHOLDS, Recipe

    recipe = model.precision.recipe if model.precision else Recipe()
    if recipe.thresholds is None and recipe.mode == "fp32":
        recipe = recipe.model_copy(update={"thresholds": DEFAULT_THRESHOLDS["fp16"]})
    return recipe


def released_manifest(store: Store, plan: TargetWork) -> Manifest | None:
    """The manifest the target's release pointer names (the previous release), if any; the pointer as planned."""
    from trtfarm.errors import CorruptObject
    from trtfarm.publishing.release import read_pointer

    try:
        pointer = plan.pointer.pointer if plan.pointer else read_pointer(store, plan.release_key)[0]
        return read_manifest(store, pointer.manifest) if pointer else None
    except CorruptObject:  # nothing to compare against; the release step repairs the pointer and says so
        return None


def _determinism(trt, model: ModelSource, plan: TargetWork, profiles, result: BuildResult, tmp: Path,
                 engine: EngineResult) -> dict:
    """Build again and compare: plan bytes always, tactic digests where the engine ran here (GPU builds)."""
    if not plan.target.determinism_check:
        return {}
    again = plan_from_onnx(trt, plan.target.toolchain.flavour.value, model.plan_input, profiles, plan.target.settings,
                           tmp / "again.plan")
    same = sha256_file(again.plan_path) == sha256_file(result.plan_path)
    out = {"determinism": "identical plan bytes in two builds" if same else "plan bytes differ between two builds"}
    if engine.tactics_digest:
        from trtfarm.validation.engine_gpu import engine_tactics
        from trtfarm.validation.tactics import tactics_digest

        second = tactics_digest(engine_tactics(again.plan_path))
        out["determinism_tactics"] = "same tactics" if second == engine.tactics_digest else \
            f"tactic digests differ: {engine.tactics_digest[:12]} vs {second[:12]}"
    return out


def attestation(store: Store, model: ModelSource, plan: TargetWork, signer: Signer | None,
                started_on: str | None = None, release_key: str | None = None) -> Attestation:
    """The provenance (this worker, its image and GPU, the converted ONNX, the keys) and signer of a publish.

    The provenance states the id of the key that signs the publish (``signer``, this worker's) and the run's key
    id (``release_key``, from the job), so a build signed by another key than the run's says so.
    """
    t, step = plan.target, model.precision
    converted = store.url(step.converted_key) if step and step.converted_key else None
    ctx = BuildContext(this_worker(t.toolchain.image, t.toolchain_key), converted,
                       step.converted_sha256 if step else None, started_on,
                       key_hint(signer.public_key_pem) if signer is not None else None, release_key)
    return Attestation(lambda m, sha: provenance_bytes(provenance_statement(m, sha, ctx)), signer)


def build_group(store: Store, model: ModelSource, group: Sequence[TargetWork], profiles: Sequence[Profile], *,
                progress: BuildProgress | None = None, upload_progress: Callable[[str], Progress] | None = None,
                run_id: str | None = None, signer: Signer | None = None,
                release_key: str | None = None) -> list[TargetOutcome]:
    """Build the plan of ``group[0]`` once and publish it for every target in ``group`` (same build digest).

    Each publish carries its provenance; with ``signer``, a signature over plan, manifest and provenance.
    """
    with interrupt.doing(f"the build of {model.name} for {', '.join(p.target.id for p in group)}"):
        outcomes = _build_group(store, model, group, profiles, progress, upload_progress, run_id, signer,
                                release_key)
    interrupt.finished(f"{model.name} for {', '.join(p.target.id for p in group)}")
    return outcomes


def _build_group(store: Store, model: ModelSource, group: Sequence[TargetWork], profiles: Sequence[Profile],
                 progress: BuildProgress | None, upload_progress: Callable[[str], Progress] | None,
                 run_id: str | None, signer: Signer | None, release_key: str | None) -> list[TargetOutcome]:
    lead = group[0]
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    trt = import_flavour(lead.target.toolchain.flavour.value)
    before, key = _timing(store, lead, trt)
    with scratch_dir("trtfarm-build-") as tmp:
        check = _check_beside(model)
        try:
            result = plan_from_onnx(trt, lead.target.toolchain.flavour.value, model.plan_input, profiles,
                                    lead.target.settings, tmp / "model.plan", timing_cache=before,
                                    progress=progress if check is None else _UntilRefused(progress, check))
        except UserInputError:  # the parser or builder refused it: onnx.checker's refusal, if any, names the cause
            if check is not None:
                check.result()
            raise
        model = check.result() if check is not None else model  # nothing is published from an unchecked model
        cache = _cache_info(trt, result, key, before)
        engine = engine_result(store, model, lead, profiles, result)
        determinism = _determinism(trt, model, lead, profiles, result, tmp, engine)
        attest = attestation(store, model, lead, signer, started, release_key)  # one worker for the group

        def publish(plan: TargetWork) -> TargetOutcome:
            def manifest_for(info: PlanInfo) -> Manifest:
                return build_manifest(model, plan, lead, result, profiles, cache, run_id, info, engine, determinism)

            up = upload_progress(plan.target.id) if upload_progress else None
            pub = publish_plan(store, plan.prefix, result.plan_path, manifest_for, up, attest, plan.manifest_absent)
            shared = "" if plan is lead else f"shares the {plan.target.compat_class} build of {lead.target.id}"
            note = shared if pub.created else _already_published_note(pub.manifest, result)
            outcome = outcome_from_manifest(store, plan, pub.manifest, status="built", reason=note)
            outcome.release = release_if_allowed(store, pub.manifest_key, pub.manifest, plan.target.release_on, run_id,
                                                 model.trial, plan.pointer, signer, plan.promotion,
                                                 override=model.release_override)
            return outcome

        if len(group) == 1:
            outcomes = [publish(lead)]
        else:  # the targets' keys are disjoint: their requests overlap on threads (the store client is thread-safe)
            with ThreadPoolExecutor(max_workers=min(len(group), PUBLISH_THREADS)) as pool:
                outcomes = list(pool.map(publish, group))
    if warning := merge_after_publish(store, trt, key, result):  # published first: a failed merge loses no build
        for o in outcomes:
            o.note("timing-cache", warning)
    return outcomes


def _check_beside(model: ModelSource) -> Future[ModelSource] | None:
    """``verified(model)`` on a thread, beside TensorRT's build (which releases the GIL), or None when it is checked.

    A local build's plan leaves onnx.checker and the graph digest to the build (``planning.plan``); a farm child's
    model comes checked. The check raises ``InvalidModel``, which stops the run as planning's check would.
    """
    if model.graph_digest is not None:
        return None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trtfarm-check")
    try:
        return pool.submit(verified, model)
    finally:
        pool.shutdown(wait=False)  # the check runs on; its thread ends with it


@dataclass
class _UntilRefused:
    """The build's progress, cancelling the build at its next step once the check beside it refused the model."""

    sink: BuildProgress | None
    check: Future[ModelSource]

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:  # noqa: D102 - BuildProgress
        if self.sink is not None:
            self.sink.phase_start(name, parent, steps)

    def step_complete(self, name: str, step: int) -> bool:  # noqa: D102 - BuildProgress
        if self.check.done() and self.check.exception() is not None:
            return False
        return self.sink is None or bool(self.sink.step_complete(name, step))

    def phase_finish(self, name: str) -> None:  # noqa: D102 - BuildProgress
        if self.sink is not None:
            self.sink.phase_finish(name)


def _already_published_note(published: Manifest, result: BuildResult) -> str:
    """A rebuild (forced, or racing another worker) found a manifest: say whether our plan matched it."""
    same = sha256_file(result.plan_path) == published.plan.sha256
    return ("already published (by a concurrent worker or an earlier run); this rebuild's plan is byte-identical"
            if same else "already published; this rebuild's plan bytes differ (the published plan is kept: "
            "builds that time tactics are not bit-reproducible)")
