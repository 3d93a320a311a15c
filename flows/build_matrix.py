"""The ``build-matrix`` flow: resolve targets, skip what is up to date or not servable, build the rest, report."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.build_target import build_target
from flows.requests import MatrixRequest, TargetRequest
from tasks.plan import convert_precision, plan_matrix, prepare_model, resolve_targets
from tasks.report import report_outcomes
from trtfarm.build import TargetOutcome, triage
from trtfarm.buildspec import spec_for_model, spec_profiles
from trtfarm.matrix import group_by_build
from trtfarm.precision import GateFailed
from trtfarm.profiles import Profile
from trtfarm.store import open_store


@flow(name="build-matrix")
def build_matrix(request: MatrixRequest) -> list[dict]:
    """Build one model for the fleet; returns one ``{target, status, reason, manifest, ...}`` per target."""
    spec, _ = spec_for_model(Path(request.model_path))
    profile_texts = request.profiles or [{n: r.text() for n, r in p.root.items()}
                                         for p in spec_profiles(Path(request.model_path), spec)[0]]
    profiles = [Profile.model_validate(p) for p in profile_texts]
    targets = resolve_targets(request.targets_file, request.targets or spec.targets)
    model = prepare_model(request.model_path, request.name or spec.name)
    try:
        model = convert_precision(request.store, model, request.precision)
    except GateFailed as failed:  # the recipe is refused: no target of this model is built
        rows = [TargetOutcome(t.id, "failed", str(failed)) for t in targets]
        report_outcomes(model.name, rows)
        return [r.to_json() for r in rows]
    plans = plan_matrix(model, targets, profiles)
    outcomes, todo = triage(open_store(request.store), plans)
    for group in group_by_build(todo):
        child = TargetRequest(model_path=str(model.path), name=model.name, targets=[p.target.id for p in group],
                              build_digest=group[0].build_digest, profiles=profile_texts, store=request.store,
                              precision=request.precision,
                              targets_file=request.targets_file)
        for row in build_target(child):
            outcomes[row["target"]] = TargetOutcome(**row)
    ordered = [outcomes[p.target.id] for p in plans]
    report_outcomes(model.name, ordered, request.store)
    return [o.to_json() for o in ordered]
