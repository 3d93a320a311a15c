"""The fleet's status as a nightly run ends: ``status/status.html`` in the store and a Prefect artifact."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.build import retry_infrastructure_only
from tasks.report import SHARE_S
from trtfarm import layout_shared
from trtfarm.reports.fleet_html import status_html, status_markdown, store_status_page
from trtfarm.run_setup import RunSetup
from trtfarm.state.views import status


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def publish_status(setup: RunSetup) -> str:
    """Write the matrix of every model x target to the store (``status.html``) and post it as an artifact.

    The artifact (key ``fleet-status``) holds the matrix as markdown and a link to the page: a presigned one for an
    S3 store, the page's URL for a file store. Returns the page's URL. The store and fleet are the run's setup's.
    """
    store = setup.store
    found = status(store, setup.fleet, trust=setup.trusted_keys())
    url = store_status_page(store, status_html(found))
    create_markdown_artifact(status_markdown(found, url, store.share_url(layout_shared.status_page_key(), SHARE_S)),
                             key="fleet-status", description="trtfarm fleet status: " + ", ".join(
                                 f"{n} {s}" for s, n in found.counts().items() if n))
    get_run_logger().info("fleet status: %s", url)
    return url


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def record_model_states(setup: RunSetup, models: list[str]) -> list[str]:
    """Record in the store the state of the models a run changed (``state/<model>.json``), which views read first.

    The executor's end, as a local run's (``pipeline.record_changed_states``): the run's fleet recorded, each
    model's state signed by the run's key. Best effort: the builds stand when the store refuses a record.
    """
    from trtfarm.pipeline import record_changed_states

    done = record_changed_states(setup, models, "farm run")
    get_run_logger().info("recorded the state of %d model(s)", len(done))
    return done
