"""The ``build-matrix`` flow: resolve models and targets, skip what is up to date, build the rest, report.

Farm mode sends one child run per build onto its target's work pool (``flows.dispatch``); local mode runs the same child
flow in this process. Either way the outcomes are read back from the manifests the children published.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import flow, get_run_logger
from prefect.runtime import deployment, flow_run

from flows.build_target import REFIT_UNAVAILABLE, build_target
from flows.dispatch import SKIPPED, ChildJob, ChildRun, cancel_children, run_children
from tasks.plan import find_exports, plan_model
from tasks.report import has_news, report_outcomes, report_run
from trtfarm.building.build import TargetOutcome, outcome_from_manifest
from trtfarm.planning.requests import MatrixRequest, TargetRequest
from trtfarm.planning.targets import TargetPlan, group_by_build
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import release_note
from trtfarm.store import open_store
from trtfarm.triggers.registry import ExportRef


@dataclass
class ModelRun:
    """One model of the run: its plans, finished outcomes, and the child builds still to run."""

    name: str
    plans: list[TargetPlan] = field(default_factory=list)
    outcomes: dict[str, TargetOutcome] = field(default_factory=dict)
    children: list[tuple[list[TargetPlan], TargetRequest]] = field(default_factory=list)
    why_built: dict[str, str] = field(default_factory=dict)  # target -> why a refit run built it in full
    child_base: dict = field(default_factory=dict)  # the TargetRequest fields every child of this model shares


def _farm_mode(request: MatrixRequest) -> bool:
    if request.dispatch == "auto":
        return deployment.id is not None
    return request.dispatch == "farm"


def _plan_model(request: MatrixRequest, export: ExportRef, farm: bool) -> ModelRun:
    """One model's plans and the children it needs (nothing is built here)."""
    planned = plan_model(request.store, export, request.targets_file, request.targets, request.profiles,
                         request.name, request.precision, request.force, farm, request.refit)
    run = ModelRun(planned.name, planned.plans, planned.outcomes)
    run.child_base = {"model": export.uri if farm else str(planned.model.path) if planned.model else export.uri,
                      "name": planned.name, "profiles": planned.profile_texts, "precision": request.precision,
                      "store": request.store, "targets_file": request.targets_file}
    refit = [p for p in planned.todo if planned.refits.get(p.target.id) and
             planned.refits[p.target.id].action == "refit"]
    run.why_built = {t: d.reason for t, d in planned.refits.items() if d.action == "build"}
    for plan in refit:
        run.children.append(([plan], TargetRequest(**run.child_base, targets=[plan.target.id],
                                                   build_digest=plan.build_digest,
                                                   refit_of=planned.refits[plan.target.id].parent_manifest)))
    _add_builds(run, [p for p in planned.todo if p not in refit], farm)
    return run


def _add_builds(run: ModelRun, plans: list[TargetPlan], farm: bool) -> list[tuple[list[TargetPlan], TargetRequest]]:
    added = [(group, TargetRequest(**run.child_base, targets=[p.target.id for p in group],
                                   build_digest=group[0].build_digest))
             for group in group_by_build(plans, by_pool=farm)]
    run.children += added
    return added


def _read_back(store_uri: str, run: ModelRun, group: list[TargetPlan], child: ChildRun) -> None:
    """The group's outcomes from the manifests its child published; the child's message where there is none."""
    store = open_store(store_uri)
    for plan in group:
        manifest = read_manifest(store, plan.manifest_key)
        if manifest is not None and child.completed:
            notes = [f"shares the {plan.target.compat_class} build of {group[0].target.id}"] if plan is not group[0] \
                else []
            if manifest.lineage.parent_manifest:
                notes.insert(0, f"refitted from {manifest.lineage.parent_manifest} (no rebuild)")
            elif plan.target.id in run.why_built:
                notes.insert(0, f"full build: {run.why_built[plan.target.id]}")
            if child.flow_run_id != "local":
                notes.append(f"built on {plan.target.gpu.pool} by child run {child.flow_run_id}"
                             + (" (resubmitted once after a crash)" if child.attempts > 1 else ""))
                if manifest.build.flow_run_id not in (None, child.flow_run_id):
                    notes.append(f"rebuilt; the manifest published by run {manifest.build.flow_run_id} is kept")
            outcome = outcome_from_manifest(store, plan, manifest, status="built", reason="; ".join(notes))
            outcome.release = release_note(store, plan.manifest_key, manifest, plan.target.release_on)
            run.outcomes[plan.target.id] = outcome
        elif child.state == SKIPPED:  # no worker online for the pool: nothing was dispatched
            run.outcomes[plan.target.id] = TargetOutcome(plan.target.id, "skipped", child.message)
        else:  # the child's verdict; a manifest there is for diagnosis or from an earlier build (force)
            why = child.message or f"child run ended {child.state} without publishing"
            run.outcomes[plan.target.id] = TargetOutcome(plan.target.id, "failed", why,
                                                         store.url(plan.manifest_key) if manifest else None)


def _run_locally(request: TargetRequest) -> ChildRun:
    try:
        build_target(request)
    except Exception as err:  # the child's own verdict (e.g. a model the parser rejects), as a farm parent sees it
        return ChildRun("local", "FAILED", str(err), 1)
    return ChildRun("local", "COMPLETED", "", 1)


async def _dispatch(jobs: list, farm: bool, request: MatrixRequest) -> list[ChildRun]:
    """Run the children: on their pools (farm), or one after another in this process (local)."""
    if not farm:
        return [_run_locally(c) for _, _, c in jobs]
    parent = str(flow_run.get_id())
    children = [ChildJob(g[0].target.gpu.pool, g[0].target.toolchain_label, g[0].target.toolchain.image, c,
                         f"{parent}:{g[0].build_digest[:16]}:{g[0].target.gpu.pool}" + (":refit" if c.refit_of else ""),
                         g[0].target.gpu.nvml_name)
                for _, g, c in jobs]
    return await run_children(children, request.child_timeout_s, request.wait_for_workers) if children else []


async def _cancel_children_hook(flow, run, state) -> None:
    await cancel_children(run.id, f"parent build-matrix run {run.id} was cancelled")


@flow(name="build-matrix", on_cancellation=[_cancel_children_hook], on_crashed=[_cancel_children_hook])
async def build_matrix(request: MatrixRequest) -> list[dict]:
    """Build models for the fleet; returns one ``{model, target, status, reason, manifest, ...}`` per target."""
    request.check_targets()  # an unknown target fails the run before any work
    farm = _farm_mode(request)
    logger = get_run_logger()
    exports = find_exports(request.store, request.model)
    logger.info("%s mode: %d model(s): %s", "farm" if farm else "local", len(exports),
                ", ".join(e.name or e.uri for e in exports))
    runs = [_plan_model(request, e, farm) for e in exports]
    jobs = [(run, group, child) for run in runs for group, child in run.children]
    results = await _dispatch(jobs, farm, request)
    unrefitted: dict[int, list[TargetPlan]] = {}
    for (run, group, child_request), child in zip(jobs, results, strict=True):
        if child_request.refit_of and REFIT_UNAVAILABLE in child.message:
            # the pool's workers cannot load the engine (no GPU there): build this target in full instead
            run.why_built[group[0].target.id] = f"refit not possible on {group[0].target.gpu.pool} workers " \
                                                f"({child.message.split(REFIT_UNAVAILABLE, 1)[1].strip(': ')[:200]})"
            unrefitted.setdefault(id(run), []).extend(group)
        else:
            _read_back(request.store, run, group, child)
    fallback = [(run, g, c) for run in runs if id(run) in unrefitted
                for g, c in _add_builds(run, unrefitted[id(run)], farm)]
    for (run, group, _), child in zip(fallback, await _dispatch(fallback, farm, request),
                                      strict=True):
        _read_back(request.store, run, group, child)
    rows = []
    for run in runs:
        ordered = [run.outcomes[p.target.id] for p in run.plans] or list(run.outcomes.values())
        if has_news(o.status for o in ordered):
            report_outcomes(run.name, ordered, request.store)
        rows += [{"model": run.name, **o.to_json()} for o in ordered]
    report_run(rows, request.store)
    return rows

