"""Tasks that plan a model and run a build job: thin wrappers adding retries and logging around core calls."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.building import phase_log as progress
from trtfarm.building.run_job import run_job
from trtfarm.building.warm import wait_warm
from trtfarm.errors import InfrastructureError, UserInputError
from trtfarm.executor import settle
from trtfarm.pipeline import WORK_PREFIX, plan_run, replanner, sweep_stale_work
from trtfarm.planning.plan import ExportWork
from trtfarm.planning.requests import MatrixRequest
from trtfarm.project.fleet_file import signing_settings
from trtfarm.scratch import scratch_dir
from trtfarm.store import Store, open_store
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Retry a failed task only when a service failed (``InfrastructureError``); user errors and bugs are final."""
    return isinstance(state.result(raise_on_failure=False), InfrastructureError)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def plan_models(request: MatrixRequest, exports: list[ExportRef], farm: bool, fleet: Fleet,
                targets: list[ResolvedTarget]) -> list[ExportWork]:
    """Everything decided before any build, for every model of the run: outcomes known now, and the decisions.

    One task for the whole run: the core plans the models together (one store listing, models on threads). It
    reads the store only; the flow's executor carries the decisions out (builds, releases, withdrawals).
    """
    return plan_run(request, open_store(request.store), exports, farm, fleet, targets)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def settle_model(store: Store, plan: ExportWork, signer) -> JobResult:
    """Carry out a model's decisions about what is published (withdrawals, releases); store failures are retried."""
    return settle(store, plan, signer)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def build_job(store_uri: str, job: BuildJob) -> JobResult:
    """Build (or refit) one job and publish it; the build's own failures are outcomes, services are retried.

    With a signing key on the worker (TRTFARM_SIGNING_KEY, or gpu_targets.yaml's signing.key) every publish is signed.
    """
    wait_warm()
    sweep_stale_work()  # what killed children left on this worker (untouched for 6 hours)
    signer = signing_settings(only="key").signer()
    with scratch_dir(WORK_PREFIX) as work:
        build_log = progress.LoggingProgress(job.lead.target.id, get_run_logger())  # phases in the run's logs
        return run_job(open_store(store_uri), job, work, progress=build_log,
                       run_id=str(flow_run.get_id() or "") or None, signer=signer)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def replan_model(request: MatrixRequest, plan: ExportWork, farm: bool, fleet: Fleet,
                 targets: list[ResolvedTarget]) -> ExportWork:
    """A model planned again once its precision step ran: it reads the step's record, and still writes nothing."""
    return replanner(request, open_store(request.store), farm, fleet, targets)(plan)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def precision_step(store_uri: str, job: PrecisionJob) -> PrecisionRun:
    """Run one precision step (convert, gate, record); a refused input is the model's failure, in its own words."""
    from trtfarm.building.precision_runner import run_precision

    try:
        return run_precision(open_store(store_uri), job)
    except UserInputError as err:
        return PrecisionRun(job_id=job.job_id, model=job.model.name, failed=str(err))
