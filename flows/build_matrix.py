"""The ``build-matrix`` flow: plan every model once, send each build job where it can run, report.

The run's setup (``trtfarm.run_setup``: store, fleet, targets, key, exports) is read once, as ``trtfarm build``
reads it; a child gets what it needs in its job. Farm mode sends one child run per job (one per compatibility
class) to a pool whose workers serve that class (``flows.dispatch``); local dispatch runs the jobs in this process,
signed by the run's key. Children return typed ``JobResult``s through the store; outcomes carry store keys. The
core plans (``plan_models``: decisions only, no store writes) and the core's executor (``trtfarm.executor``, which
``trtfarm build`` calls too) carries the plans out around the children.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.runtime import deployment, flow_run

from flows.dispatch import SKIPPED, ChildJob, ChildRun, cancel_children, lost_rows, run_children
from tasks.build import plan_models, replan_model, settle_model
from trtfarm import layout_shared
from trtfarm.building.warm import wait_warm, warm_in_background
from trtfarm.errors import TrtfarmError
from trtfarm.executor import changed_models, execute, precision_first
from trtfarm.planning.requests import MatrixRequest
from trtfarm.run_setup import RunSetup, setup_run
from trtfarm.store import Store
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun
from trtfarm.vocabulary.target_outcome import LostChild, Reason, RunRow, TargetOutcome

# the S3 client, while the engine starts the run (building/warm.py); the builder, the report and the state record are
# imported where they are used: a farm parent builds nothing, and reports once its children are done
warm_in_background(toolchains=False)


def _farm_mode(request: MatrixRequest) -> bool:
    if request.dispatch == "auto":
        return deployment.id is not None
    return request.dispatch == "farm"


def _child(job: BuildJob, request: MatrixRequest, parent: str) -> ChildJob:
    lead = job.lead.target

    def parameters(attempt: int) -> dict:
        return {"job": job.model_dump(mode="json"), "store": request.store,
                "result_key": layout_shared.job_result_key(parent, f"{job.job_id}-{attempt}")}

    return ChildJob(tuple(job.pools), lead.toolchain_label, lead.toolchain.image, parameters,
                    f"{parent}:{job.job_id}", f"{job.model.name}-{'+'.join(job.targets)}",
                    " or ".join(dict.fromkeys(p.target.gpu.nvml_name for p in job.plans)))


def _result_of(store: Store, job: BuildJob, child: ChildRun, parent: str) -> JobResult:
    """The child's ``JobResult`` from the store; its state message where it wrote none (crash, timeout, skip)."""
    blob = None
    if child.flow_run_id:
        blob = store.get(layout_shared.job_result_key(parent, f"{job.job_id}-{child.attempts}"))
    losses = "; ".join(loss.sentence() for loss in child.losses)
    if blob is None:
        status = "skipped" if child.state == SKIPPED else "failed"
        why = child.message or f"child run ended {child.state} without a result"
        return JobResult(job_id=job.job_id, model=job.model.name,
                         outcomes=[TargetOutcome(t, status, why, build_digest=job.build_digest,
                                                 notes=(Reason("lost", losses),) if losses else ())
                                   for t in job.targets])
    result = JobResult.model_validate_json(blob.data)
    note = f"built on {child.pool} by child run {child.flow_run_id}"
    if child.worker:
        note = f"built on {child.pool} by worker {child.worker} in child run {child.flow_run_id}"
    if child.attempts > 1:
        note += f", resubmitted after {losses}"
    for o in result.outcomes:
        if o.status != "failed":
            o.note("built-on", note)
    return result


async def _dispatch(jobs: list[BuildJob], farm: bool, setup: RunSetup, lost: list[LostChild]) -> list[JobResult]:
    """Run the jobs: on their pools (farm), or one after another in this process (local, signed by the run's key).

    Children lost to their hosts (and resubmitted) are added to ``lost``, one row per loss.
    """
    if not jobs:
        return []
    if not farm:
        from tasks.job import build_job

        return [build_job(setup.store, job, setup.signer) for job in jobs]
    request, parent = setup.request, str(flow_run.get_id())
    children = await run_children([_child(j, request, parent) for j in jobs], request.child_timeout_s,
                                  request.wait_for_workers, request.child_pending_limit_s)
    lost += lost_rows(children)
    return [_result_of(setup.store, j, c, parent) for j, c in zip(jobs, children, strict=True)]


def _precision_child(job: PrecisionJob, request: MatrixRequest, parent: str) -> ChildJob:
    """A precision step's child: on its model's first target's pool, queue and image (a worker that builds anyway)."""
    lead = job.lead

    def parameters(attempt: int) -> dict:
        return {"precision": job.model_dump(mode="json"), "store": request.store,
                "result_key": layout_shared.job_result_key(parent, f"{job.job_id}-{attempt}")}

    return ChildJob((lead.gpu.pool,), lead.toolchain_label, lead.toolchain.image, parameters,
                    f"{parent}:{job.job_id}", f"{job.model.name}-precision-{job.recipe.mode}", lead.gpu.nvml_name)


def _precision_of(store: Store, job: PrecisionJob, child: ChildRun, parent: str) -> PrecisionRun:
    """The child's ``PrecisionRun`` from the store; its state message where it wrote none (crash, timeout, skip)."""
    blob = store.get(layout_shared.job_result_key(parent, f"{job.job_id}-{child.attempts}")) \
        if child.flow_run_id else None
    if blob is None:
        losses = "; ".join(loss.sentence() for loss in child.losses)
        why = child.message or f"precision child run ended {child.state} without a result"
        return PrecisionRun(job_id=job.job_id, model=job.model.name, failed="; ".join(filter(None, [why, losses])))
    return PrecisionRun.model_validate_json(blob.data)


async def _dispatch_precision(jobs: list[PrecisionJob], farm: bool, setup: RunSetup,
                              lost: list[LostChild]) -> list[PrecisionRun]:
    """Run the precision steps: each on a worker of its model's first target (farm), or in this process (local)."""
    if not farm:
        from tasks.job import precision_step

        return [precision_step(setup.store, job) for job in jobs]
    parent = str(flow_run.get_id())
    request = setup.request
    children = await run_children([_precision_child(j, request, parent) for j in jobs], request.child_timeout_s,
                                  request.wait_for_workers, request.child_pending_limit_s)
    lost += lost_rows(children)
    return [_precision_of(setup.store, j, c, parent) for j, c in zip(jobs, children, strict=True)]


async def _cancel_children_hook(flow, run, state) -> None:
    await cancel_children(run.id, f"parent build-matrix run {run.id} was cancelled")


@flow(name="build-matrix", on_cancellation=[_cancel_children_hook], on_crashed=[_cancel_children_hook])
async def build_matrix(request: MatrixRequest) -> list[RunRow]:
    """Build models for the fleet; returns one row (model, target outcome) per target."""
    wait_warm()
    setup = setup_run(request)  # store, fleet, targets, key, exports: read once; an unknown target fails here
    farm = _farm_mode(request)
    logger = get_run_logger()
    logger.info("%s mode: %d model(s): %s", "farm" if farm else "local", len(setup.exports),
                ", ".join(e.name or e.uri for e in setup.exports))
    plans = plan_models(setup, farm)
    lost: list[LostChild] = []

    async def steps(jobs: list[PrecisionJob]) -> list[PrecisionRun]:
        return await _dispatch_precision(jobs, farm, setup, lost)

    plans = await precision_first(plans, steps, lambda plan: replan_model(setup, plan, farm))
    if not any(plan.jobs for plan in plans):
        logger.info("every target is up to date or skipped: nothing to dispatch")
    setup.sweep_temporaries(plans)  # what a killed build of these plans left in the store

    async def dispatch(jobs: list[BuildJob]) -> list[JobResult]:
        return await _dispatch(jobs, farm, setup, lost)

    rows = await execute(setup.store, plans, dispatch, lambda job: f"{' or '.join(job.pools)} workers", setup.signer,
                         settle_model)
    setup.note_unsigned(rows)
    from tasks.report import report_run

    report_run(rows, setup.store, lost)  # first: the state record reads the run's outcomes from its report
    _record(setup, changed_models(plans, rows), logger)
    return rows


def _record(setup: RunSetup, changed: list[str], logger) -> None:
    """The changed models' states, and on the nightly (every registered model) the fleet's matrix page."""
    from tasks.status import publish_status, record_model_states

    if changed:
        try:
            record_model_states(setup, changed)
        except TrtfarmError as e:  # the builds stand; views compute what is not recorded
            logger.warning("state not recorded: %s", e)
    if setup.request.model is None:  # the nightly: the fleet's matrix, in the store and the UI
        try:
            publish_status(setup)
        except TrtfarmError as e:  # the builds stand; the next nightly writes the page
            logger.warning("fleet status not written: %s", e)
