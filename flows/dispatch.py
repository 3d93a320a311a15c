"""Farm dispatch: one child run per build on its target's work pool, waited for by events, never half-done.

Each child is ``run_deployment("build-target/<pool>")`` with an idempotency key (parent run, job id, attempt), so a
retried parent finds its children instead of starting new ones. A job whose compatibility class spans several pools
goes to the first of them with an online worker. The parent waits for each child's final state (one event
subscription for all of them, and a read each slice: flows/ends.py), cancels a child that overruns its timeout, and
resubmits a crashed child (a crash is the infrastructure: the process was killed, the machine went away; a failure
is the build's own verdict and is final). A child that lost its host (its heartbeats stopped: flows/heartbeats.py;
a termination notice; left Pending by a worker that died, ``flows.pending``) is resubmitted once per loss, up to
``MAX_LOSSES`` times, on its pool or another pool of its class with an online worker; a child whose process crashed
on a live host is resubmitted once. Each loss is kept (which run, on which worker, why) for the report.
What a child built comes back as its ``JobResult``, which the child writes to the store at the key the parent gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from uuid import UUID

import httpx
from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from prefect.states import Cancelling

from flows.ends import Ends
from flows.heartbeats import LOST_AFTER_S, detection_off, loss_of, worker_of
from flows.pending import crash_if_orphaned
from trtfarm.vocabulary.target_outcome import LostChild

WAIT_SLICE_S = 15  # how often a waiting parent looks at a child that is still Pending
MAX_LOSSES = 3  # a child is resubmitted once per lost host, this many times at most

CHILD_FLOW = "build-target"
SKIPPED = "SKIPPED"  # a child that was never submitted, with the reason
MISSING = "MISSING"  # the status of a work pool the server does not have


def child_deployment(pool: str) -> str:
    """The build-target deployment of a work pool (prefect.yaml names one per pool after the pool)."""
    return f"{CHILD_FLOW}/{pool}"


@dataclass(frozen=True)
class Loss:
    """One submission of a child that crashed: its run, the pool and worker it ran on, the kind of loss and why."""

    flow_run_id: str
    name: str
    pool: str
    worker: str
    kind: str  # flows.heartbeats.loss_of (the state's type and name): host lost, notice, orphaned, crashed
    message: str

    def sentence(self) -> str:
        """The loss for people: ``child run X was lost on worker W (pool P): why``."""
        where = f"worker {self.worker} (pool {self.pool})" if self.worker else f"pool {self.pool}"
        why = {"host lost": f"no heartbeat for {LOST_AFTER_S} s, its host is gone",
               "notice": "its worker got a termination notice (SIGTERM)",
               "orphaned": "left Pending by a worker that is gone"}.get(self.kind, f"crashed ({self.message})")
        return f"child run {self.name} was lost on {where}: {why}"


@dataclass(frozen=True)
class ChildRun:
    """How a child build run ended: its final state, the message, how many submissions it took, and each loss."""

    flow_run_id: str
    state: str
    message: str
    attempts: int
    pool: str = ""
    worker: str = ""  # the worker that ran the last submission (looked up when there were losses)
    losses: tuple[Loss, ...] = ()

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


async def run_child(job: ChildJob, pool: str, timeout_s: int, pool_types: dict[str, str], pending_limit_s: int,
                    ends: Ends) -> ChildRun:
    """Submit one child build to its pool's toolchain queue and wait for it; resubmit it when it crashes.

    Container pools (docker, kubernetes) get the toolchain's image as the run's ``image`` job variable. A child
    Pending longer than ``pending_limit_s`` whose worker is gone is crashed here, and so resubmitted too.
    """
    losses: list[Loss] = []
    for attempt in range(1, MAX_LOSSES + 2):
        variables = {"image": job.image} if job.image and pool_types.get(pool, "process") != "process" else None
        try:
            run = await run_deployment(child_deployment(pool), parameters=job.parameters(attempt), timeout=0,
                                       idempotency_key=f"{job.key}:{attempt}", work_queue_name=job.queue,
                                       job_variables=variables, flow_run_name=f"{job.name}-{attempt}")
        except ObjectNotFound:  # the pool is there but its build-target deployment is not
            return ChildRun("", SKIPPED, f"deployment {child_deployment(pool)} is not on the Prefect server: add a "
                                         f"build-target deployment named {pool} to prefect.yaml and run `trtfarm "
                                         "farm deploy`", attempt, pool, losses=await _where(losses))
        if losses:
            get_run_logger().warning("%s; resubmitted as child run %s to pool %s", losses[-1].sentence(), run.name,
                                     pool)
        final = await _wait(ends, run.id, pool, timeout_s, pending_limit_s)
        if final is None:
            why = f"no result within {timeout_s} s (child_timeout_s); child run {run.id} cancelled"
            await cancel_run(run.id, why)
            return ChildRun(str(run.id), "TIMED_OUT", why, attempt, pool, losses=await _where(losses))
        state = final.state
        if state is not None and state.is_crashed():
            message = state.message or ""
            losses.append(Loss(str(run.id), run.name, final.work_pool_name or pool, "", loss_of(state), message))
            if _resubmit(losses):  # at once: the worker each ran on is looked up after
                pool = await _resubmission_pool(job, pool)
                continue
        worker = await _worker(run.id) if losses else ""
        return ChildRun(str(run.id), state.type.value if state else "UNKNOWN", (state.message or "") if state else "",
                        attempt, pool, worker, await _where(losses))
    raise AssertionError("unreachable: _resubmit stops after MAX_LOSSES")


def _resubmit(losses: list[Loss]) -> bool:
    """Resubmit after each loss of a host, up to ``MAX_LOSSES``; after a process crash on a live host, once."""
    return len(losses) <= MAX_LOSSES and sum(loss.kind == "crashed" for loss in losses) <= 1


async def _where(losses: list[Loss]) -> tuple[Loss, ...]:
    """The losses with the worker each lost run ran on."""
    return tuple([replace(loss, worker=await _worker(loss.flow_run_id)) for loss in losses])


async def _worker(flow_run_id) -> str:
    """The worker that took a run, for the report; "" when the server cannot say (it is only for people)."""
    try:
        async with get_client() as client:
            return await worker_of(client, flow_run_id)
    except (httpx.HTTPError, PrefectHTTPStatusError) as e:
        get_run_logger().warning("could not look up the worker of child %s: %s", flow_run_id, e)
        return ""


async def _resubmission_pool(job: ChildJob, pool: str) -> str:
    """Where a lost child goes again: its pool if a worker of it is online, else another of its class's pools.

    With no worker online in any of them, its pool: the run waits there for a worker.
    """
    async with get_client() as client:
        for name in dict.fromkeys([pool, *job.pools]):
            found = await _pool_or_none(client, name)
            if found is not None and getattr(found.status, "value", found.status) == "READY":
                return name
    get_run_logger().warning("no worker of pool %s is online now: the resubmission waits there for one",
                             " or ".join(dict.fromkeys([pool, *job.pools])))
    return pool


def lost_rows(children: list[ChildRun]) -> list[LostChild]:
    """One row per child run lost to its host: where it ran, why, and what became of its resubmission."""
    rows = []
    for child in children:
        for i, loss in enumerate(child.losses):
            job, attempt = loss.name.rsplit("-", 1)
            row = LostChild(loss.name, loss.flow_run_id, loss.worker, loss.pool, loss.kind, f"{job}-{int(attempt) + 1}",
                            child.pool, child.state.lower() + (f" by worker {child.worker}" if child.worker else ""))
            if i + 1 < len(child.losses):
                row = replace(row, to_pool=child.losses[i + 1].pool, outcome="lost again")
            elif loss.flow_run_id == child.flow_run_id:  # its last submission: it was not resubmitted
                why = "a second crash of its own" if loss.kind == "crashed" else f"{len(child.losses)} losses"
                row = replace(row, resubmitted_as=None, to_pool=None, outcome=f"not resubmitted after {why}")
            rows.append(row)
    return rows


async def _wait(ends: Ends, run_id: UUID, pool: str, timeout_s: int, pending_limit_s: int):
    """The child's final flow run, or None when it overran ``timeout_s``; crashes it when it is orphaned in Pending."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while (left := deadline - loop.time()) > 0:
            if (run := await ends.wait(run_id, min(WAIT_SLICE_S, left))) is not None:
                return run
            await crash_if_orphaned(run_id, pool, pending_limit_s)  # the next slice then sees it Crashed
    except asyncio.CancelledError:  # the parent is being cancelled: take the child down with it
        await asyncio.shield(cancel_run(run_id, "parent run cancelled"))
        raise
    return None


async def run_children(jobs: list[ChildJob], timeout_s: int, wait_for_workers: bool = False,
                       pending_limit_s: int = 120) -> list[ChildRun]:
    """Run every child concurrently; results in the same order.

    A pool with no online worker (Prefect marks it NOT_READY) gets no child: its targets are skipped with the reason,
    unless ``wait_for_workers`` queues them anyway (workers that start later pick them up). A pool the server does
    not have gets no child either, whatever ``wait_for_workers`` says; the other pools' children run.
    """
    async with get_client() as client:
        pools = {p: await _pool_or_none(client, p) for p in {p for j in jobs for p in j.pools}}
        if off := await detection_off(client):
            get_run_logger().warning("lost hosts will not be seen: %s", off)
    types = {name: pool.type for name, pool in pools.items() if pool is not None}

    def status(pool: str) -> str:
        return getattr(pools[pool].status, "value", pools[pool].status) if pools[pool] else MISSING

    async def one(job: ChildJob) -> ChildRun:
        there = [p for p in job.pools if pools[p] is not None]
        ready = [p for p in there if status(p) == "READY"]
        if not there:
            return ChildRun("", SKIPPED, _missing_pool(job), 0, job.pools[0])
        if not ready and not wait_for_workers:
            names = " or ".join(there)
            return ChildRun("", SKIPPED, f"no worker is online for pool {names} (status {status(there[0])}): "
                                         f"start `trtfarm worker --pool {there[0]}` on a machine with "
                                         f"{job.gpu or 'its GPU'}, or run with --wait-for-workers to queue the build",
                            0, there[0])
        return await run_child(job, (ready or there)[0], timeout_s, types, pending_limit_s, ends)

    async with Ends() as ends:  # one event subscription for every child (flows/ends.py)
        return list(await asyncio.gather(*(one(job) for job in jobs)))


async def _pool_or_none(client, name: str):
    try:
        return await client.read_work_pool(name)
    except ObjectNotFound:
        return None


def _missing_pool(job: ChildJob) -> str:
    names = " or ".join(job.pools)
    return (f"work pool {names} is not on the Prefect server: run `trtfarm pools sync` to create the fleet's pools, "
            f"or set the pool of {job.gpu or 'the GPU'} in gpu_targets.yaml to a pool the server has")


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
