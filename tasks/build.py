"""Tasks that plan a run's models and settle their releases: thin wrappers adding retries around core calls.

The tasks a build runs (a farm child, or a local dispatch) are in ``tasks/job.py``.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from trtfarm.errors import InfrastructureError
from trtfarm.executor import settle
from trtfarm.pipeline import plan_run, replanner
from trtfarm.planning.plan import ExportWork
from trtfarm.run_setup import RunSetup
from trtfarm.store import Store
from trtfarm.vocabulary.job import JobResult


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


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def replan_model(setup: RunSetup, plan: ExportWork, farm: bool) -> ExportWork:
    """A model planned again once its precision step ran: it reads the step's record, and still writes nothing."""
    return replanner(setup, farm)(plan)
