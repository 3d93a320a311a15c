"""The ``build-target`` flow: run the one ``BuildJob`` the parent planned, on a worker of its pool.

A farm deploys it once per work pool (``build-target/<pool>``). It never plans: it checks the model bytes against
the job's sha256, builds, publishes, and writes its ``JobResult`` to the store key the parent gave. It ends Failed
when a target failed, so the Prefect UI shows the verdict; the parent reads the result either way.

A termination notice (SIGTERM: a spot reclaim, ``docker stop``, ``kubectl drain``, or ``trtfarm worker`` passing its
own notice on) stops the build at once: the builder is cancelled, nothing half-done is published, the build folder
is removed, and the run ends Crashed with the reason, so the parent resubmits it without waiting for heartbeats. A
SIGTERM that is Prefect cancelling the run (the parent's timeout, a cancelled parent) stays a cancellation.
"""

from __future__ import annotations

import os
import signal

from prefect import flow, get_run_logger
from prefect.states import Completed, Crashed, Failed

from flows.heartbeats import NOTICE, TERMINATION_NOTICE
from tasks.job import build_job, precision_step, worker_signer
from trtfarm import interrupt
from trtfarm.building.warm import warm_in_background
from trtfarm.store import Store, open_store
from trtfarm.vocabulary.job import BuildJob
from trtfarm.vocabulary.precision_job import PrecisionJob
from trtfarm.workers.built_by import NAME_ENV

warm_in_background()  # the S3 client and the toolchain, while the engine starts the run (building/warm.py)


@flow(name="build-target")
def build_target(job: BuildJob | None = None, store: str = "", result_key: str | None = None,
                 precision: PrecisionJob | None = None):
    """Build ``job`` (one compatibility class) and publish a manifest for each of its targets.

    With ``precision`` instead: run that precision step before the model's builds (on a worker of its first
    target) and write its ``PrecisionRun`` to ``result_key``.
    """
    logger = get_run_logger()
    if precision is not None:
        return _precision(precision, open_store(store), result_key)
    logger.info("building %s for %s (build %s)", job.model.name, ", ".join(job.targets), job.build_digest[:12])
    opened = open_store(store)  # once: the build and its result share it
    try:
        with interrupt.stopping_on(signal.SIGTERM):
            result = build_job(opened, job, worker_signer())  # the worker's own key; the job names the run's
    except interrupt.Interrupted as stopped:
        return _noticed(stopped)
    if result_key:
        opened.put_if_absent(result_key, result.model_dump_json(indent=2).encode())
    if result.refit_unavailable:
        return Completed(message=f"refit unavailable on this worker: {result.refit_unavailable}")
    if result.failed:
        why = "; ".join(f"{o.target}: {o.reason}" for o in result.failed)
        logger.error("%s", why)
        return Failed(message=why)
    return Completed(message=f"published {len(result.outcomes)} target(s)")


def _precision(job: PrecisionJob, store: Store, result_key: str | None):
    """Run the precision step; Failed when its gate (or its input) refused the recipe, as a build's failure is."""
    get_run_logger().info("precision step of %s: %s (step %s)", job.model.name, job.recipe.mode, job.key[:12])
    try:
        with interrupt.stopping_on(signal.SIGTERM):
            run = precision_step(store, job)
    except interrupt.Interrupted as stopped:
        return _noticed(stopped)
    if result_key:
        store.put_if_absent(result_key, run.model_dump_json(indent=2).encode())
    if run.failed:
        get_run_logger().error("%s", run.failed)
        return Failed(message=run.failed)
    return Completed(message=f"precision step {job.recipe.mode}: {run.step.gate}")


def _noticed(stopped: interrupt.Interrupted):
    """The run's end after a SIGTERM stopped the build: Crashed with the notice, or Prefect's cancellation."""
    from prefect.exceptions import TerminationSignal

    if _cancelling():
        raise TerminationSignal(signal.SIGTERM) from stopped  # Prefect's own cancellation path takes it from here
    worker = os.environ.get(NAME_ENV) or "this worker"
    why = (f"{NOTICE} on worker {worker}: the build stopped at once and published nothing; the parent "
           "resubmits it")
    get_run_logger().warning("%s", why)
    return Crashed(message=why, name=TERMINATION_NOTICE)


def _cancelling() -> bool:
    """Whether the server is cancelling this run (then the SIGTERM was Prefect's, not a notice)."""
    import httpx
    from prefect import get_client
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.runtime import flow_run

    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run.get_id()).state
    except (httpx.HTTPError, PrefectHTTPStatusError):
        return False  # the server cannot say: a notice (it is the infrastructure going away either way)
    return bool(state and state.is_cancelling())
