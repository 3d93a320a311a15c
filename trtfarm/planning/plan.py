"""Plan once: what one run does for one model export, decided before anything is built.

``plan_export`` fetches the export (or takes a local ONNX), reads its build spec, resolves targets and profiles,
reuses the precision step the store recorded (else decides the ``PrecisionJob`` the executor runs first, and the
model is planned again after it), computes every target's build digest, and looks up what is already published. It
yields a frozen ``ExportWork``: the outcomes already known (skipped, up to date, refused by the precision gate)
and one ``BuildJob`` per compatibility-class build still missing. A job carries all a builder needs; whoever runs
it (this process, or a farm child on a worker) never plans again.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from trtfarm import layout
from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.identity import model_name_from_path
from trtfarm.machine.capabilities import Capabilities, local_capabilities
from trtfarm.modelfile import model_source, verified
from trtfarm.planning.precision import planned_precision
from trtfarm.planning.requests import MatrixRequest
from trtfarm.planning.triage import Triage, skip_unservable, triage, triage_listed
from trtfarm.precision.recipe import GateFailed
from trtfarm.profiles.profile import (
    Profile,
    check_profiles_against_inputs,
    onnx_inputs,
    onnx_shape_tensors,
    profile_texts,
    profiles_json,
)
from trtfarm.project.fleet_file import load_fleet
from trtfarm.project.spec_file import spec_for_model, spec_precision, spec_profiles
from trtfarm.publishing.registry import export_place, export_record, fetch_export, fetch_folder, local_copy
from trtfarm.store import Store, is_uri
from trtfarm.vocabulary.decisions import Release, Withdraw
from trtfarm.vocabulary.exports import ExportRecord, ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.job import BuildJob, ProfileText
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.precision_job import PrecisionJob
from trtfarm.vocabulary.target_outcome import TargetOutcome
from trtfarm.vocabulary.targets import TargetWork, group_by_build, plan_targets

if TYPE_CHECKING:  # a local build never asks the read model: imported where a farm run's first stage makes one
    from trtfarm.state.run_view import RunView


class ExportWork(BaseModel):
    """One model of a run: every target in order, the outcomes known before any build, and the builds to run.

    The run's work for the model (not a TensorRT plan, nor ``trtfarm whatif --fleet``'s what-if).
    """

    model_config = ConfigDict(frozen=True)
    name: str
    model: ModelSource | None  # None when the precision gate refused the recipe (every target failed)
    profiles: list[ProfileText] = []
    targets: list[str] = []
    outcomes: dict[str, TargetOutcome] = {}
    jobs: list[BuildJob] = []
    releases: list[Release] = []  # published targets to release (policy permitting), carried out by the executor
    withdrawals: list[Withdraw] = []  # damaged publishes to withdraw before their rebuild
    # the precision step to run before any build (the store holds no record of it); the builds are planned after it
    precision: PrecisionJob | None = None

    @property
    def settled(self) -> bool:
        """True when nothing is left to do for this model: no build, no release, no withdrawal."""
        return not (self.jobs or self.releases or self.withdrawals or self.precision)


def _profiles(request: MatrixRequest, path: Path, spec) -> list[Profile]:
    if request.profiles:
        return [Profile.model_validate(p) for p in request.profiles]
    return spec_profiles(path, spec)[0]


def model_name(given: str | None, export: ExportRef, spec_name: str | None, path: Path) -> str:
    """The one naming rule of every entry point (build, farm run, models push, the webhook's exports).

    ``--name`` when given; else a registered export's name (what ``models push`` named it, by this same rule); else
    farm.yaml's ``name:``; else the default: the folder's name for a ``model.onnx``, the file's stem otherwise (for
    an export URI, the folder the URI names, not the local copy).
    """
    if given:
        return given
    if export.name and export.named:
        return export.name
    return spec_name or export.name or model_name_from_path(path)


def plan_export(request: MatrixRequest, export: ExportRef, store: Store, *, farm: bool,
                fleet: Fleet | None = None, caps: Capabilities | None = None,
                view: RunView | None = None, targets: list[ResolvedTarget] | None = None) -> ExportWork:
    """Decide what to build for ``export``; a refused precision recipe fails every target (nothing is built).

    ``fleet``, ``caps`` and ``targets`` (the request's targets, resolved) come once per run from the caller;
    ``caps`` is ignored in farm mode (each job goes to a pool whose workers check themselves). The first stage
    (``listed_stage``) answers a registered export from its recorded digests and the store's read model
    (``view``: the run's, else this model's), without fetching the model: when every target is up to date, that is
    the plan; else the model is fetched and only the targets it did not settle are looked at again. Planning reads
    the store and writes nothing: a published plan that was never released, or a damaged one, is a decision in the
    plan (``releases``, ``withdrawals``) that ``trtfarm.executor`` carries out.
    """
    if farm and not is_uri(export.uri):
        raise UserInputError(f"{export.uri}: a farm run builds registered models or export URIs that every worker "
                             "can read. Fix: `trtfarm models push FOLDER` and run with its name")
    fleet = fleet or load_fleet(request.targets_file)
    first = None
    if farm and not (request.force or request.refit or request.verify_store):
        first = listed_stage(request, export, store, fleet, view, targets)
        if first is not None and not first.todo:
            return first.plan
    path = local_copy(export, first.record if first else None)
    spec, spec_path = spec_for_model(path)
    resolved = first.resolved if first else _targets(request, fleet, spec, targets)
    if request.name is not None and not request.name.strip():
        raise UserInputError("--name '': give the model a name (letters, digits, '.', '_' or '-'), or leave --name "
                             "out to use farm.yaml's name or the file name")
    # the files' digests find what is published; the model is checked (onnx.checker, the graph digest, the profiles
    # against its inputs) when something is to be built from it
    model = model_source(path, model_name(request.name, export, spec.name, path), verify=False)
    model = model.model_copy(update={"promotion": spec.promotion})
    profiles = first.profiles if first else _profiles(request, path, spec)
    if is_uri(export.uri):
        model = model.model_copy(update={"source_uri": f"{export.uri}/{layout.ONNX_NAME}"})
    recipe, calibration, heldout = spec_precision(path, spec, request.precision, request.calibration,
                                                  request.heldout)
    texts = profile_texts(profiles)
    ids = [t.id for t in resolved]
    checked = recipe.mode != "fp32" or recipe.auto_pin
    if checked:  # the precision step converts a checked model
        model = _checked(model, profiles)
    try:
        found = planned_precision(store, model, recipe, calibration, heldout, export, next(iter(resolved), None),
                                  max_memory=request.max_memory, unchecked_modelopt=request.unchecked_modelopt)
    except GateFailed as failed:
        return ExportWork(name=model.name, model=None, profiles=texts, targets=ids,
                          outcomes={t: TargetOutcome(t, "failed", str(failed)) for t in ids})
    if isinstance(found, PrecisionJob):  # the builds wait for the step: planned again once it ran
        return ExportWork(name=model.name, model=None, profiles=texts, targets=ids, precision=found)
    model = found.model_copy(update={"trial": trial_reason(request.release, recipe.mode, spec.precision.mode,
                                                           spec_path is not None),
                                     "release_override": request.release is True})
    plans = plan_targets(model, model.plan_digest, resolved, profiles, None)
    known, plans = first.settled(plans) if first else (Triage(), plans)
    found = triage(store, plans, request.force, request.verify_store, model.trial)
    found.add(known)
    todo = found.todo
    if not farm:  # a published target is up to date; of the rest, what this machine cannot build is skipped
        skipped, todo = skip_unservable(todo, caps or local_capabilities())
        found.done.update(skipped)
    if todo and not checked:  # a local build runs onnx.checker and the graph digest beside TensorRT's build
        model = _checked(model, profiles, beside_the_build=not (farm or request.refit))  # (a refit compares graphs)
    if todo:  # what the builds publish records the export's place in the order of exports, never its file's time
        model = _placed(store, model, export, first.record if first else None)
    jobs = _jobs(store, request, model, export.uri if is_uri(export.uri) else str(path), texts, todo)
    return ExportWork(name=model.name, model=model, profiles=texts, targets=ids, outcomes=found.done, jobs=jobs,
                      releases=found.releases, withdrawals=found.withdrawals)


def _placed(store: Store, model: ModelSource, export: ExportRef, record: ExportRecord | None) -> ModelSource:
    """``model`` with its export's place in the order of exports: when its bytes were first registered or built.

    ``record``: the export's ``export.json`` when the run read it already (else it is read for an export URI).
    """
    if record is None and is_uri(export.uri):
        record = export_record(export)
    place = export_place(store, model.name, model.onnx_digest, record.registered_at if record else None)
    return model.model_copy(update={"exported_at": place})


def _checked(model: ModelSource, profiles: list[Profile], beside_the_build: bool = False) -> ModelSource:
    """The model checked by onnx.checker with its graph digest, and the profiles checked against its inputs.

    ``beside_the_build`` (a local build): only the profiles are checked here (reading the graph's inputs refuses a
    file that is no ONNX model); onnx.checker and the graph digest run on a thread while TensorRT builds
    (``building.build``), and their refusal stops the run before anything is published. A farm run checks here,
    once, before any child starts.
    """
    if not beside_the_build:
        model = verified(model)
    check_profiles_against_inputs(profiles, onnx_inputs(model.path), str(model.path), onnx_shape_tensors(model.path))
    return model


def _targets(request: MatrixRequest, fleet: Fleet, spec, targets: list[ResolvedTarget] | None) -> list:
    """The targets of this model: the request's (resolved once per run), else farm.yaml's, else the fleet's."""
    if targets is not None and (request.targets or not spec.targets):
        return targets
    return select_targets(fleet, request.targets or spec.targets or None)


def trial_reason(release: bool | None, mode: str, declared: str, in_spec: bool) -> str | None:
    """Why a run's plans move no release pointer, or None when they may (policy permitting).

    A build releases only the model's declared recipe (farm.yaml's ``precision``, else fp32) unless ``release`` says
    otherwise: True releases any recipe, False none.
    """
    if release is True:
        return None
    if release is False:
        return "trial build (--trial)"
    if mode == declared:
        return None
    where = "farm.yaml's" if in_spec else "the default"
    return f"trial build: {mode}, the model's recipe is {declared} ({where}); --release moves the pointers"


def _cached_record(export: ExportRef, cached: Path) -> ExportRecord | None:
    """The export's ``export.json``, from this machine's cache when a run read it before, else from the store.

    A registered export's record is written once, create-only, and never changes, so the cache cannot go stale. A
    cached copy that does not parse, or names another export, is read from the store again and replaced.
    """
    if export.export_id and cached.is_file():
        found = _own_record(export, cached)
        if found is not None:
            return found
    record = export_record(export)
    if record is not None and export.export_id:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}")
        tmp.write_bytes(record.to_bytes())
        os.replace(tmp, cached)
    return record


def _own_record(export: ExportRef, cached: Path) -> ExportRecord | None:
    """The cached record of ``export``, or None when it is damaged or another export's."""
    try:
        record = ExportRecord.from_bytes(cached.read_bytes(), str(cached))
    except (OSError, CorruptObject):
        return None
    same = record.export_id == export.export_id and record.export_id.endswith(f"-{record.onnx_digest[:12]}")
    return record if same else None


@dataclass(frozen=True)
class ListedStage:
    """What the first stage of ``plan_export`` settled from the export's record and the store's listings."""

    record: ExportRecord
    resolved: list[ResolvedTarget]
    profiles: list[Profile]
    plan: ExportWork  # the targets settled so far (every target when nothing is to build), with their decisions
    todo: list[TargetWork]  # carrying what the listings said: no manifest, no release pointer

    def settled(self, plans: list[TargetWork]) -> tuple[Triage, list[TargetWork]]:
        """What this stage settled for ``plans`` (the same builds), and the plans still to look at."""
        done = self.plan.outcomes
        listed = {p.manifest_key: p for p in self.todo}
        known = {p.target.id: done[p.target.id] for p in plans if p.target.id in done
                 and done[p.target.id].manifest_key == p.manifest_key}
        rest = [listed.get(p.manifest_key, p) for p in plans if p.target.id not in known]
        same = set(known) | {p.target.id for p in plans if p.manifest_key in listed}  # a withdrawal stands for them
        return Triage(known, [], [r for r in self.plan.releases if r.target in known],
                      [w for w in self.plan.withdrawals if w.target in same]), rest


def up_to_date_export(request: MatrixRequest, export: ExportRef, store: Store, fleet: Fleet,
                      view: RunView | None = None,
                      targets: list[ResolvedTarget] | None = None) -> ExportWork | None:
    """The plan of a registered export whose every target is up to date (its cell released), else None; reads only.

    None when anything needs more: a build, or a release a killed run left undone (the run carries it out).
    """
    first = listed_stage(request, export, store, fleet, view, targets)
    return first.plan if first is not None and not first.todo and first.plan.settled else None


def listed_stage(request: MatrixRequest, export: ExportRef, store: Store, fleet: Fleet,
                 view: RunView | None = None, targets: list[ResolvedTarget] | None = None) -> ListedStage | None:
    """The first stage of planning a registered export: what its record and the store's read model settle, or None.

    Trusts the digests recorded at registration (``export.json``) and reads only the build spec; the model bytes
    are fetched (and re-hashed) only when something is built. Covers the nightly's common case: an fp32 recipe with
    profiles given in the request or farm.yaml. Anything else (a precision step, profiles derived from a shape log,
    an export without a record) takes the full path from the start.
    """
    if not is_uri(export.uri):
        return None
    folder = fetch_folder(export, "specs")
    record = _cached_record(export, folder / "export.json")
    if record is None:
        return None
    path = fetch_export(export, folder, spec_only=True, record=record)
    spec, _ = spec_for_model(path)
    recipe = spec_precision(path, spec, request.precision)[0]
    if request.release is not None or recipe.mode != spec.precision.mode:
        return None  # a trial (or a forced release) takes the full path, which knows it is one
    if recipe.mode != "fp32" or recipe.auto_pin or not (request.profiles or spec.profiles):
        return None
    resolved = _targets(request, fleet, spec, targets)
    name = model_name(request.name, export, spec.name, path)
    model = ModelSource(name=name, path=path, source_uri=f"{export.uri}/{layout.ONNX_NAME}",
                        onnx_digest=record.onnx_digest, graph_digest=record.graph_digest,
                        exported_at=record.registered_at, promotion=spec.promotion)
    profiles = _profiles(request, path, spec)
    plans = plan_targets(model, model.onnx_digest, resolved, profiles, None)
    if view is None:
        from trtfarm.state.run_view import RunView

        view = RunView(store, fleet, resolved)
    found = triage_listed(store, plans, view)
    return ListedStage(record, resolved, profiles, ExportWork(
        name=name, model=model, profiles=profile_texts(profiles), targets=[t.id for t in resolved],
        outcomes=found.done, releases=found.releases, withdrawals=found.withdrawals), found.todo)


def _jobs(store: Store, request: MatrixRequest, model: ModelSource, uri: str, texts: list[ProfileText],
          todo: list[TargetWork]) -> list[BuildJob]:
    """One job per build digest; with ``refit``, one refit job per target whose released plan can take the weights."""
    base = {"model": model, "model_uri": uri, "profiles": texts}
    reasons: dict[str, str] = {}
    jobs = []
    if request.refit:
        from trtfarm.building.refit import refit_decision

        wanted = profiles_json([Profile.model_validate(p) for p in texts])
        for plan in list(todo):
            decision = refit_decision(store, model, plan, wanted)
            if decision.action == "refit":
                jobs.append(BuildJob(**base, plans=[plan], build_digest=plan.build_digest,
                                     refit_of=decision.parent_manifest, parent=decision.parent))
                todo.remove(plan)
            else:
                reasons[plan.target.id] = decision.reason
    for group in group_by_build(todo):
        why = "; ".join(dict.fromkeys(reasons[p.target.id] for p in group if p.target.id in reasons))
        jobs.append(BuildJob(**base, plans=group, build_digest=group[0].build_digest, full_build_reason=why))
    return jobs


def full_build_of(job: BuildJob, why: str) -> BuildJob:
    """The full build that replaces a refit the workers could not do."""
    return job.model_copy(update={"refit_of": None, "parent": None, "full_build_reason": why, "fallback": True})

