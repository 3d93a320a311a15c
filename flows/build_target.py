"""The ``build-target`` flow: run the one ``BuildJob`` the parent planned, on a worker of its pool.

A farm deploys it once per work pool (``build-target/<pool>``). It never plans: it checks the model bytes against
the job's sha256, builds, publishes, and writes its ``JobResult`` to the store key the parent gave. It ends Failed
when a target failed, so the Prefect UI shows the verdict; the parent reads the result either way.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.states import Completed, Failed

from tasks.build import build_job
from trtfarm.building.warm import warm_in_background
from trtfarm.store import open_store
from trtfarm.vocabulary.job import BuildJob

warm_in_background()  # the S3 client and the toolchain, while the engine starts the run (building/warm.py)


@flow(name="build-target")
def build_target(job: BuildJob, store: str, result_key: str | None = None):
    """Build ``job`` (one compatibility class) and publish a manifest for each of its targets."""
    logger = get_run_logger()
    logger.info("building %s for %s (build %s)", job.model.name, ", ".join(job.targets), job.build_digest[:12])
    result = build_job(store, job)
    if result_key:
        open_store(store).put_if_absent(result_key, result.model_dump_json(indent=2).encode())
    if result.refit_unavailable:
        return Completed(message=f"refit unavailable on this worker: {result.refit_unavailable}")
    if result.failed:
        why = "; ".join(f"{o.target}: {o.reason}" for o in result.failed)
        logger.error("%s", why)
        return Failed(message=why)
    return Completed(message=f"published {len(result.outcomes)} target(s)")
