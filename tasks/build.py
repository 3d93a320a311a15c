"""Tasks that plan a model and run a build job: thin wrappers adding retries and logging around core calls."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.building import progress
from trtfarm.building.job import run_job
from trtfarm.building.warm import wait_warm
from trtfarm.errors import InfrastructureError
from trtfarm.executor import settle
from trtfarm.pipeline import WORK_PREFIX, plan_run, sweep_stale_work
from trtfarm.planning.plan import ExportPlan
from trtfarm.run_setup import RunSetup
from trtfarm.scratch import scratch_dir
from trtfarm.signing.keys import Signer
from trtfarm.store import Store
from trtfarm.vocabulary.fleet_file import signing_settings
from trtfarm.vocabulary.job import BuildJob, JobResult


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Retry a failed task only when a service failed (``InfrastructureError``); user errors and bugs are final."""
    return isinstance(state.result(raise_on_failure=False), InfrastructureError)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def plan_models(setup: RunSetup, farm: bool) -> list[ExportPlan]:
    """Everything decided before any build, for every model of the run: outcomes known now, and the decisions.

    One task for the whole run: the core plans the models together (one store listing, models on threads), with
    the store, fleet and targets the run's setup read once. It reads the store only; the flow's executor carries
    the decisions out (builds, releases, withdrawals). Every job carries the run's key id.
    """
    r = setup.request
    return setup.stamped(plan_run(r, setup.store, setup.exports, farm, setup.fleet, setup.targets))


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def settle_model(store: Store, plan: ExportPlan, signer) -> JobResult:
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
