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
from trtfarm.project.fleet_file import signing_settings
from trtfarm.run_setup import RunSetup
from trtfarm.scratch import scratch_dir
from trtfarm.signing.keys import Signer
from trtfarm.store import Store
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Retry a failed task only when a service failed (``InfrastructureError``); user errors and bugs are final."""
    return isinstance(state.result(raise_on_failure=False), InfrastructureError)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def plan_models(setup: RunSetup, farm: bool) -> list[ExportWork]:
    """Everything decided before any build, for every model of the run: outcomes known now, and the decisions.

    One task for the whole run: the core plans the models together (one store listing, models on threads), with
    the store, fleet and targets the run's setup read once. It reads the store only; the flow's executor carries
    the decisions out (builds, releases, withdrawals). Every job carries the run's key id.
    """
    r = setup.request
    return setup.stamped(plan_run(r, setup.store, setup.exports, farm, setup.fleet, setup.targets))


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def settle_model(store: Store, plan: ExportWork, signer) -> JobResult:
    """Carry out a model's decisions about what is published (withdrawals, releases); store failures are retried."""
    return settle(store, plan, signer)


def worker_signer() -> Signer | None:
    """The worker's own key, from the worker's settings: ``TRTFARM_SIGNING_KEY``, else its gpu_targets.yaml's.

    A farm child signs its build (and the release it makes) with it; the run's key id travels in the job, and the
    provenance states both.
    """
    return signing_settings(only="key").signer()


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def build_job(store: Store, job: BuildJob, signer: Signer | None) -> JobResult:
    """Build (or refit) one job and publish it; the build's own failures are outcomes, services are retried.

    ``signer`` signs every publish: the run's key in a local dispatch, the worker's own (``worker_signer``) in a
    farm child.
    """
    wait_warm()
    sweep_stale_work()  # what killed children left on this worker (untouched for 6 hours)
    with scratch_dir(WORK_PREFIX) as work:
        build_log = progress.LoggingProgress(job.lead.target.id, get_run_logger())  # phases in the run's logs
        return run_job(store, job, work, progress=build_log,
                       run_id=str(flow_run.get_id() or "") or None, signer=signer)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def replan_model(setup: RunSetup, plan: ExportWork, farm: bool) -> ExportWork:
    """A model planned again once its precision step ran: it reads the step's record, and still writes nothing."""
    return replanner(setup, farm)(plan)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def precision_step(store: Store, job: PrecisionJob) -> PrecisionRun:
    """Run one precision step (convert, gate, record); a refused input is the model's failure, in its own words."""
    from trtfarm.building.precision_runner import run_precision

    try:
        return run_precision(store, job)
    except UserInputError as err:
        return PrecisionRun(job_id=job.job_id, model=job.model.name, failed=str(err))
