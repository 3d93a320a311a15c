"""A child run left Pending by a worker that died after claiming it: found, crashed, so the parent resubmits it.

A worker claims a run by setting it Pending, then starts its process, which sets it Running. A worker killed
between the two leaves the run Pending for ever, and Prefect counts Pending runs against the pool's and the queue's
concurrency limits, so with a limit of 1 nothing queued behind it on that pool ever starts. Prefect does not record
which worker claimed a run, so a run Pending longer than the limit (default 120 s; a process start took 11-23 s at
p95 in the soaks on a loaded 2-core machine) counts as orphaned when its pool has no online worker, or when a worker
of its pool went offline or started (again) since the run turned Pending. A run that a live worker is still starting
is left alone. Setting the run Crashed frees its slot; the parent then resubmits it as it does any crash.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

import httpx
from prefect import get_client, get_run_logger
from prefect.client.schemas.objects import StateType, WorkerStatus
from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter
from prefect.exceptions import PrefectHTTPStatusError
from prefect.states import Crashed

from flows.heartbeats import ORPHANED, ORPHANED_NAME

MISSED_HEARTBEATS = 3  # Prefect's foreman marks a worker offline after this many missed heartbeats


async def crash_if_orphaned(run_id: UUID, pool: str, limit_s: int) -> bool:
    """Set the run Crashed when it has been Pending longer than ``limit_s`` and nobody is left to start it.

    A server that fails the check (5xx, a dropped connection) is logged and the check is left to the next slice.
    """
    try:
        return await _crash_if_orphaned(run_id, pool, limit_s)
    except (httpx.TransportError, PrefectHTTPStatusError) as e:
        if isinstance(e, PrefectHTTPStatusError) and e.response.status_code < 500:
            raise  # a request the server refuses is a bug here, not the server's weather
        get_run_logger().warning("could not check whether pending child %s is orphaned: %s", run_id, e)
        return False


async def _crash_if_orphaned(run_id: UUID, pool: str, limit_s: int) -> bool:
    async with get_client() as client:
        run = await client.read_flow_run(run_id)
        state = run.state
        if state is None or state.type != StateType.PENDING:
            return False
        pending_s = (datetime.now(timezone.utc) - state.timestamp).total_seconds()
        if pending_s <= limit_s:
            return False
        pool = run.work_pool_name or pool
        gone = await _why_orphaned(client, pool, state.timestamp)
        if gone is None:
            return False
        why = (f"child run {run.name} ({run.id}) was Pending for {pending_s:.0f} s on pool {pool} (limit {limit_s} s, "
               f"child_pending_limit_s) and {gone}: {ORPHANED}")
        get_run_logger().warning("%s; crashing it so that it is resubmitted", why)
        await client.set_flow_run_state(run.id, Crashed(message=why, name=ORPHANED_NAME), force=True)
        return True


async def _why_orphaned(client, pool: str, since: datetime) -> str | None:
    """Why no worker can still be starting a run its pool's worker took at ``since``; None when one may be."""
    workers = await client.read_workers_for_work_pool(pool)
    if not any(w.status == WorkerStatus.ONLINE for w in workers):
        return f"no worker of pool {pool} is online"
    offline = [w.name for w in workers if w.status != WorkerStatus.ONLINE and w.last_heartbeat_time is not None
               and w.last_heartbeat_time >= since - timedelta(seconds=MISSED_HEARTBEATS *
                                                              (w.heartbeat_interval_seconds or 30))]
    if offline:
        return f"worker {', '.join(offline)} of pool {pool} went offline since"
    restarted = await _started_since(client, {w.name for w in workers}, since)
    if restarted:
        return f"worker {', '.join(restarted)} of pool {pool} started again since"
    return None


async def _started_since(client, names: set[str], since: datetime) -> list[str]:
    """The workers among ``names`` that emitted ``prefect.worker.started`` after ``since`` (a new process)."""
    started = EventFilter(occurred=EventOccurredFilter(since=since, until=datetime.now(timezone.utc)),
                          event=EventNameFilter(name=["prefect.worker.started"]))
    page = await client.read_events(started, limit=50)  # the API's maximum page
    return sorted({e.resource.get("prefect.resource.name") for e in page.events} & names)
