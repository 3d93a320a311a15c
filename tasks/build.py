"""The build-and-publish task."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.building import progress
from trtfarm.building.build import TargetOutcome, build_group
from trtfarm.building.refit import refit_and_publish
from trtfarm.errors import UserInputError
from trtfarm.planning.targets import ModelSource, TargetPlan
from trtfarm.profiles.profile import Profile
from trtfarm.store import open_store


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Retry a failed task unless its error is the user's (``UserInputError``: retrying cannot help)."""
    try:
        state.result()
    except UserInputError:
        return False
    except Exception:
        return True
    return False


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def build_and_publish(store_uri: str, model: ModelSource, group: list[TargetPlan],
                      profiles: list[Profile]) -> list[TargetOutcome]:
    """Build once for the group's compatibility class and publish for each target; user errors are not retried."""
    return build_group(open_store(store_uri), model, group, profiles,
                       progress=progress.build_progress(group[0].target.id),
                       upload_progress=progress.upload_progress(), run_id=str(flow_run.get_id() or "") or None)


@task(cache_policy=NO_CACHE)
def refit_and_publish_plan(store_uri: str, model: ModelSource, plan: TargetPlan, parent_manifest: str,
                           profiles: list[Profile]) -> TargetOutcome:
    """Refit a released plan with the new weights (GPU only) and publish it; not retried (same machine, same end)."""
    return refit_and_publish(open_store(store_uri), model, plan, parent_manifest, profiles,
                             run_id=str(flow_run.get_id() or "") or None)
