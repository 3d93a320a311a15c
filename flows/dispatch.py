"""Farm dispatch: one child run per build on its target's work pool, waited for by events, never half-done.

Each child is ``run_deployment("build-target/<pool>")`` with an idempotency key (parent run, job id, attempt), so a
retried parent finds its children instead of starting new ones. A job whose compatibility class spans several pools
goes to the first of them with an online worker. The parent waits for each child's final
state (event-driven), cancels a child that overruns its timeout, and resubmits a crashed child once (a crash is the
infrastructure: the process was killed, the machine went away; a failure is the build's own verdict and is final).
What a child built comes back as its ``JobResult``, which the child writes to the store at the key the parent gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment
from prefect.exceptions import FlowRunWaitTimeout
from prefect.flow_runs import wait_for_flow_run
from prefect.states import Cancelling

CHILD_FLOW = "build-target"


def child_deployment(pool: str) -> str:
    """The build-target deployment of a work pool (prefect.yaml names one per pool after the pool)."""
    return f"{CHILD_FLOW}/{pool}"


@dataclass(frozen=True)
class ChildRun:
    """How a child build run ended: its final state, the message, and how many submissions it took."""

    flow_run_id: str
    state: str
    message: str
    attempts: int
    pool: str = ""

    @property
    def completed(self) -> bool:
        """True when the child finished without error."""
        return self.state == StateType.COMPLETED.value


async def cancel_run(flow_run_id: UUID | str, why: str) -> None:
    """Ask the child's worker to stop it (Cancelling -> the worker kills the process -> Cancelled)."""
    async with get_client() as client:
        await client.set_flow_run_state(UUID(str(flow_run_id)), Cancelling(message=why), force=True)


@dataclass(frozen=True)
class ChildJob:
    """Where one child may go (pools whose GPUs share the build), its toolchain queue and image, and its parameters.

    ``parameters(attempt)`` gives the flow parameters of each submission (each attempt writes its own result key).
    """

    pools: tuple[str, ...]
    queue: str
    image: str | None
    parameters: Callable[[int], dict]
    key: str
    name: str
    gpu: str = ""  # the GPU model the pools' workers have, for people


async def run_child(job: ChildJob, pool: str, timeout_s: int, pool_types: dict[str, str]) -> ChildRun:
    """Submit one child build to its pool's toolchain queue and wait for it; resubmit once if it crashes.

    Container pools (docker, kubernetes) get the toolchain's image as the run's ``image`` job variable.
    """
    logger = get_run_logger()
    variables = {"image": job.image} if job.image and pool_types.get(pool, "process") != "process" else None
    for attempt in (1, 2):
        run = await run_deployment(child_deployment(pool), parameters=job.parameters(attempt), timeout=0,
                                   idempotency_key=f"{job.key}:{attempt}", work_queue_name=job.queue,
                                   job_variables=variables, flow_run_name=f"{job.name}-{attempt}")
        try:
            final = await wait_for_flow_run(run.id, timeout=timeout_s)
        except FlowRunWaitTimeout:
            why = f"no result within {timeout_s} s (child_timeout_s); child run {run.id} cancelled"
            await cancel_run(run.id, why)
            return ChildRun(str(run.id), "TIMED_OUT", why, attempt, pool)
        except asyncio.CancelledError:  # the parent is being cancelled: take the child down with it
            await asyncio.shield(cancel_run(run.id, "parent run cancelled"))
            raise
        state = final.state
        if state is not None and state.is_crashed() and attempt == 1:
            logger.warning("child %s on %s crashed (%s); resubmitting once", run.id, pool, state.message)
            continue
        return ChildRun(str(run.id), state.type.value if state else "UNKNOWN", (state.message or "") if state else "",
                        attempt, pool)
    raise AssertionError("unreachable")


SKIPPED = "SKIPPED"


async def run_children(jobs: list[ChildJob], timeout_s: int, wait_for_workers: bool = False) -> list[ChildRun]:
    """Run every child concurrently; results in the same order.

    A pool with no online worker (Prefect marks it NOT_READY) gets no child: its targets are skipped with the reason,
    unless ``wait_for_workers`` queues them anyway (workers that start later pick them up).
    """
    async with get_client() as client:
        pools = {p: await client.read_work_pool(p) for p in {p for j in jobs for p in j.pools}}
    types = {name: pool.type for name, pool in pools.items()}

    def status(pool: str) -> str:
        return getattr(pools[pool].status, "value", pools[pool].status)

    async def one(job: ChildJob) -> ChildRun:
        ready = [p for p in job.pools if status(p) == "READY"]
        if not ready and not wait_for_workers:
            names = " or ".join(job.pools)
            return ChildRun("", SKIPPED, f"no worker is online for pool {names} (status {status(job.pools[0])}): "
                                         f"start `trtfarm worker --pool {job.pools[0]}` on a machine with "
                                         f"{job.gpu or 'its GPU'}, or run with --wait-for-workers to queue the build",
                            0, job.pools[0])
        return await run_child(job, (ready or list(job.pools))[0], timeout_s, types)

    return list(await asyncio.gather(*(one(job) for job in jobs)))


async def cancel_children(parent_flow_run_id: UUID | str, why: str) -> int:
    """Cancel the unfinished child runs of a parent (the cancellation hook of build-matrix); returns how many."""
    live = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.PAUSED]
    async with get_client() as client:
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[UUID(str(parent_flow_run_id))]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=live))))
    for run in runs:
        await cancel_run(run.id, why)
    return len(runs)
