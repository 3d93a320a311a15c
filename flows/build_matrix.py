"""The ``build-matrix`` flow: resolve models and targets, skip what is up to date, build the rest, report.

Farm mode sends one child run per build onto its target's work pool (``tasks.farm``); local mode runs the same child
flow in this process. Either way the outcomes are read back from the manifests the children published.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import flow, get_run_logger
from prefect.runtime import deployment, flow_run

from flows.build_target import build_target
from flows.requests import MatrixRequest, TargetRequest
from tasks.farm import ChildJob, ChildRun, cancel_children, run_children
from tasks.plan import find_exports, plan_model
from tasks.report import report_outcomes, report_run
from trtfarm.build import TargetOutcome, outcome_from_manifest
from trtfarm.matrix import TargetPlan, group_by_build
from trtfarm.publish import read_manifest
from trtfarm.registry import ExportRef
from trtfarm.release import release_note
from trtfarm.store import open_store


@dataclass
class ModelRun:
    """One model of the run: its plans, finished outcomes, and the child builds still to run."""

    name: str
    plans: list[TargetPlan] = field(default_factory=list)
    outcomes: dict[str, TargetOutcome] = field(default_factory=dict)
    children: list[tuple[list[TargetPlan], TargetRequest]] = field(default_factory=list)


def _farm_mode(request: MatrixRequest) -> bool:
    if request.dispatch == "auto":
        return deployment.id is not None
    return request.dispatch == "farm"


def _plan_model(request: MatrixRequest, export: ExportRef, farm: bool) -> ModelRun:
    """One model's plans and the children it needs (nothing is built here)."""
    planned = plan_model(request.store, export, request.targets_file, request.targets, request.profiles,
                         request.name, request.precision, request.force, farm)
    run = ModelRun(planned.name, planned.plans, planned.outcomes)
    for group in group_by_build(planned.todo, by_pool=farm):
        child = TargetRequest(model=export.uri if farm else str(planned.model.path), name=planned.name,
                              targets=[p.target.id for p in group], build_digest=group[0].build_digest,
                              profiles=planned.profile_texts, precision=request.precision, force=request.force,
                              store=request.store, targets_file=request.targets_file)
        run.children.append((group, child))
    return run


def _read_back(store_uri: str, run: ModelRun, group: list[TargetPlan], child: ChildRun) -> None:
    """The group's outcomes from the manifests its child published; the child's message where there is none."""
    store = open_store(store_uri)
    for plan in group:
        manifest = read_manifest(store, plan.manifest_key)
        if manifest is not None and child.completed:
            notes = [f"shares the {plan.target.compat_class} build of {group[0].target.id}"] if plan is not group[0] \
                else []
            if child.flow_run_id != "local":
                notes.append(f"built on {plan.target.gpu.pool} by child run {child.flow_run_id}"
                             + (" (resubmitted once after a crash)" if child.attempts > 1 else ""))
                if manifest.build.flow_run_id not in (None, child.flow_run_id):
                    notes.append(f"rebuilt; the manifest published by run {manifest.build.flow_run_id} is kept")
            outcome = outcome_from_manifest(store, plan, manifest, status="built", reason="; ".join(notes))
            outcome.release = release_note(store, plan.manifest_key, manifest, plan.target.release_on)
            run.outcomes[plan.target.id] = outcome
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
    if farm:
        parent = str(flow_run.get_id())
        children = [ChildJob(g[0].target.gpu.pool, g[0].target.toolchain_label, g[0].target.toolchain.image, c,
                              f"{parent}:{g[0].build_digest[:16]}:{g[0].target.gpu.pool}") for _, g, c in jobs]
        results = await run_children(children, request.child_timeout_s)
    else:
        results = [_run_locally(c) for _, _, c in jobs]
    for (run, group, _), child in zip(jobs, results, strict=True):
        _read_back(request.store, run, group, child)
    rows = []
    for run in runs:
        ordered = [run.outcomes[p.target.id] for p in run.plans] or list(run.outcomes.values())
        if any(o.status in ("built", "failed") for o in ordered):
            report_outcomes(run.name, ordered, request.store)
        rows += [{"model": run.name, **o.to_json()} for o in ordered]
    report_run(rows, request.store)
    return rows

