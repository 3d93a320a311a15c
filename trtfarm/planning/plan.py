"""What one run does for one model export, decided before anything is built.

``plan_export`` fetches the export (or takes a local ONNX), reads its build spec, resolves targets and profiles,
runs (or reuses) the precision step, computes every target's build digest and looks up what is already published.
The flows wrap it in one task per model, so a nightly over many models pays one task each.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from trtfarm.building.build import TargetOutcome, triage
from trtfarm.building.refit import RefitDecision, refit_decision
from trtfarm.errors import UserInputError
from trtfarm.identity import model_name_from_path
from trtfarm.planning.buildspec import spec_for_model, spec_precision, spec_profiles
from trtfarm.planning.fleet import load_fleet, select_targets
from trtfarm.planning.targets import (
    ModelSource,
    TargetPlan,
    local_capabilities,
    model_source,
    plan_targets,
    with_precision,
)
from trtfarm.precision import GateFailed
from trtfarm.profiles.profile import Profile, profiles_json
from trtfarm.store import open_store
from trtfarm.triggers.registry import ExportRef, fetch_export


@dataclass
class ExportPlan:
    """One model of a run: its source, profiles, every target's plan, finished outcomes and what still needs a build."""

    name: str
    model: ModelSource | None
    profile_texts: list[dict] = field(default_factory=list)
    plans: list[TargetPlan] = field(default_factory=list)
    outcomes: dict[str, TargetOutcome] = field(default_factory=dict)
    todo: list[TargetPlan] = field(default_factory=list)
    refits: dict[str, RefitDecision] = field(default_factory=dict)  # target -> decision (refit runs only)


def local_copy(export: ExportRef) -> Path:
    """The export's model.onnx on this machine: fetched (sha256-checked, cached by URI) or the local path itself."""
    if "://" not in export.uri:
        return Path(export.uri)
    key = hashlib.sha256(export.uri.encode()).hexdigest()[:16]
    return fetch_export(export, Path(tempfile.gettempdir()) / "trtfarm" / "exports" / key)


def plan_export(store_uri: str, export: ExportRef, *, targets_file: str, targets: list[str],
                profiles: list[dict], name: str | None, precision: str | None, force: bool,
                farm: bool, refit: bool = False) -> ExportPlan:
    """Decide what to build for ``export``; a refused precision recipe fails every target (nothing is built)."""
    if farm and "://" not in export.uri:
        raise UserInputError(f"{export.uri}: a farm run builds registered models or export URIs that every worker "
                             "can read. Fix: `trtfarm models push FOLDER` and run with its name")
    path = local_copy(export)
    spec, _ = spec_for_model(path)
    texts = profiles or [{n: r.text() for n, r in p.root.items()} for p in spec_profiles(path, spec)[0]]
    resolved = select_targets(load_fleet(targets_file), targets or spec.targets or None)
    model = model_source(path, name or export.name or spec.name or model_name_from_path(path))
    if "://" in export.uri:
        model = replace(model, source_uri=f"{export.uri}/model.onnx")
    recipe, calibration, heldout = spec_precision(path, spec, precision)
    store = open_store(store_uri)
    try:
        model = with_precision(store, model, recipe, calibration, heldout)
    except GateFailed as failed:
        return ExportPlan(model.name, None, texts,
                          outcomes={t.id: TargetOutcome(t.id, "failed", str(failed)) for t in resolved})
    plans = plan_targets(model, model.plan_digest, resolved, [Profile.model_validate(p) for p in texts],
                         None if farm else local_capabilities())
    outcomes, todo = triage(store, plans, force)
    planned = ExportPlan(model.name, model, texts, plans, outcomes, todo)
    if refit:
        wanted = profiles_json([Profile.model_validate(p) for p in texts])
        planned.refits = {p.target.id: refit_decision(store, model, p, wanted) for p in todo}
    return planned
