"""The ``build-matrix`` flow: plan every model once, send each build job where it can run, report.

Farm mode sends one child run per job (one per compatibility class) to a pool whose workers serve that class
(``flows.dispatch``); local dispatch runs the jobs in this process. Children return typed ``JobResult``s through the
store; outcomes carry store keys. The core plans (``plan_models``: decisions only, no store writes) and the core's
executor (``trtfarm.executor``, which ``trtfarm build`` calls too) carries the plans out around the children.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.runtime import deployment, flow_run

from flows.dispatch import SKIPPED, ChildJob, ChildRun, cancel_children, lost_rows, run_children
from tasks.build import build_job, plan_models, precision_step, replan_model, settle_model
from tasks.report import report_run
from tasks.status import publish_status, record_model_states
from trtfarm import layout
from trtfarm.errors import TrtfarmError
from trtfarm.executor import changed_models, execute, precision_first
from trtfarm.pipeline import find_exports
from trtfarm.planning.requests import MatrixRequest
from trtfarm.project.fleet_file import load_fleet, signing_settings
from trtfarm.store import Store, open_store
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun
from trtfarm.vocabulary.target_outcome import LostChild, RunRow, TargetOutcome


def _farm_mode(request: MatrixRequest) -> bool:
    if request.dispatch == "auto":
        return deployment.id is not None
    return request.dispatch == "farm"


def _child(job: BuildJob, request: MatrixRequest, parent: str) -> ChildJob:
    lead = job.lead.target

    def parameters(attempt: int) -> dict:
        return {"job": job.model_dump(mode="json"), "store": request.store,
                "result_key": layout.job_result_key(parent, f"{job.job_id}-{attempt}")}

    return ChildJob(tuple(job.pools), lead.toolchain_label, lead.toolchain.image, parameters,
                    f"{parent}:{job.job_id}", f"{job.model.name}-{'+'.join(job.targets)}",
                    " or ".join(dict.fromkeys(p.target.gpu.nvml_name for p in job.plans)))


def _result_of(store: Store, job: BuildJob, child: ChildRun, parent: str) -> JobResult:
    """The child's ``JobResult`` from the store; its state message where it wrote none (crash, timeout, skip)."""
    blob = None
    if child.flow_run_id:
        blob = store.get(layout.job_result_key(parent, f"{job.job_id}-{child.attempts}"))
    losses = "; ".join(loss.sentence() for loss in child.losses)
    if blob is None:
        status = "skipped" if child.state == SKIPPED else "failed"
        why = child.message or f"child run ended {child.state} without a result"
        return JobResult(job_id=job.job_id, model=job.model.name,
                         outcomes=[TargetOutcome(t, status, "; ".join(filter(None, [why, losses])),
                                                 build_digest=job.build_digest) for t in job.targets])
    result = JobResult.model_validate_json(blob.data)
    note = f"built on {child.pool} by child run {child.flow_run_id}"
    if child.worker:
        note = f"built on {child.pool} by worker {child.worker} in child run {child.flow_run_id}"
    if child.attempts > 1:
        note += f", resubmitted after {losses}"
    for o in result.outcomes:
        if o.status != "failed":
            o.reason = "; ".join(filter(None, [o.reason, note]))
    return result


async def _dispatch(jobs: list[BuildJob], farm: bool, request: MatrixRequest, store: Store,
                    lost: list[LostChild]) -> list[JobResult]:
    """Run the jobs: on their pools (farm), or one after another in this process (local).

    Children lost to their hosts (and resubmitted) are added to ``lost``, one row per loss.
    """
    if not jobs:
        return []
    if not farm:
        return [build_job(request.store, job) for job in jobs]
    parent = str(flow_run.get_id())
    children = await run_children([_child(j, request, parent) for j in jobs], request.child_timeout_s,
                                  request.wait_for_workers, request.child_pending_limit_s)
    lost += lost_rows(children)
    return [_result_of(store, j, c, parent) for j, c in zip(jobs, children, strict=True)]


def _precision_child(job: PrecisionJob, request: MatrixRequest, parent: str) -> ChildJob:
    """A precision step's child: on its model's first target's pool, queue and image (a worker that builds anyway)."""
    lead = job.lead

    def parameters(attempt: int) -> dict:
        return {"precision": job.model_dump(mode="json"), "store": request.store,
                "result_key": layout.job_result_key(parent, f"{job.job_id}-{attempt}")}

    return ChildJob((lead.gpu.pool,), lead.toolchain_label, lead.toolchain.image, parameters,
                    f"{parent}:{job.job_id}", f"{job.model.name}-precision-{job.recipe.mode}", lead.gpu.nvml_name)


def _precision_of(store: Store, job: PrecisionJob, child: ChildRun, parent: str) -> PrecisionRun:
    """The child's ``PrecisionRun`` from the store; its state message where it wrote none (crash, timeout, skip)."""
    blob = store.get(layout.job_result_key(parent, f"{job.job_id}-{child.attempts}")) if child.flow_run_id else None
    if blob is None:
        losses = "; ".join(loss.sentence() for loss in child.losses)
        why = child.message or f"precision child run ended {child.state} without a result"
        return PrecisionRun(job_id=job.job_id, model=job.model.name, failed="; ".join(filter(None, [why, losses])))
    return PrecisionRun.model_validate_json(blob.data)


async def _dispatch_precision(jobs: list[PrecisionJob], farm: bool, request: MatrixRequest, store: Store,
                              lost: list[LostChild]) -> list[PrecisionRun]:
    """Run the precision steps: each on a worker of its model's first target (farm), or in this process (local)."""
    if not farm:
        return [precision_step(request.store, job) for job in jobs]
    parent = str(flow_run.get_id())
    children = await run_children([_precision_child(j, request, parent) for j in jobs], request.child_timeout_s,
                                  request.wait_for_workers, request.child_pending_limit_s)
    lost += lost_rows(children)
    return [_precision_of(store, j, c, parent) for j, c in zip(jobs, children, strict=True)]


async def _cancel_children_hook(flow, run, state) -> None:
    await cancel_children(run.id, f"parent build-matrix run {run.id} was cancelled")


@flow(name="build-matrix", on_cancellation=[_cancel_children_hook], on_crashed=[_cancel_children_hook])
async def build_matrix(request: MatrixRequest) -> list[RunRow]:
    """Build models for the fleet; returns one row (model, target outcome) per target."""
    fleet = load_fleet(request.targets_file)  # read and resolved once; the plan and the executor carry them
    targets = select_targets(fleet, request.targets or None)  # an unknown target fails the run before any work
    farm = _farm_mode(request)
    logger = get_run_logger()
    store = open_store(request.store)
    exports = find_exports(store, request.model)
    logger.info("%s mode: %d model(s): %s", "farm" if farm else "local", len(exports),
                ", ".join(e.name or e.uri for e in exports))
    plans = plan_models(request, exports, farm, fleet, targets)
    lost: list[LostChild] = []

    async def steps(jobs: list[PrecisionJob]) -> list[PrecisionRun]:
        return await _dispatch_precision(jobs, farm, request, store, lost)

    plans = await precision_first(plans, steps, lambda plan: replan_model(request, plan, farm, fleet, targets))
    if not any(plan.jobs for plan in plans):
        logger.info("every target is up to date or skipped: nothing to dispatch")

    async def dispatch(jobs: list[BuildJob]) -> list[JobResult]:
        return await _dispatch(jobs, farm, request, store, lost)

    signer = signing_settings(request.targets_file, only="key", fleet=fleet).signer()  # signs what it releases
    rows = await execute(store, plans, dispatch, lambda job: f"{' or '.join(job.pools)} workers", signer,
                         settle_model)
    report_run(rows, request.store, lost)
    changed = changed_models(plans, rows)
    if changed:
        try:
            record_model_states(request.store, request.targets_file, changed)
        except TrtfarmError as e:  # the builds stand; views compute what is not recorded
            logger.warning("state not recorded: %s", e)
    if request.model is None:  # the nightly (every registered model): the fleet's matrix, in the store and the UI
        try:
            publish_status(request.store, request.targets_file)
        except TrtfarmError as e:  # the builds stand; the next nightly writes the page
            logger.warning("fleet status not written: %s", e)
    return rows
