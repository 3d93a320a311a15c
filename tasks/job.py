"""The tasks a farm child (``flows/build_target.py``) runs: build one job, or run one precision step.

Apart from ``tasks/build.py``'s planning tasks, so that a parent (build-matrix) does not import the builder and a
child imports only what a build needs; a local dispatch imports this module when it builds.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from tasks.build import retry_infrastructure_only
from trtfarm.building import phase_log as progress
from trtfarm.building.run_job import run_job
from trtfarm.building.warm import wait_warm
from trtfarm.errors import UserInputError
from trtfarm.pipeline import WORK_PREFIX, sweep_stale_work
from trtfarm.project.fleet_file import signing_settings
from trtfarm.scratch import scratch_dir
from trtfarm.signing.keys import Signer
from trtfarm.store import Store
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun


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
def precision_step(store: Store, job: PrecisionJob) -> PrecisionRun:
    """Run one precision step (convert, gate, record); a refused input is the model's failure, in its own words."""
    from trtfarm.building.precision_runner import run_precision

    try:
        return run_precision(store, job)
    except UserInputError as err:
        return PrecisionRun(job_id=job.job_id, model=job.model.name, failed=str(err))
