"""Waiting for hundreds of children at once: one event subscription for all of them, and a read each slice.

Prefect's ``wait_for_flow_run`` opens an event subscription per run. A parent that waits for 200 children in 15 s
slices so opens 200 websockets every 15 s, and on a loaded server (the soak) they did not open within the slice: no
child's end was seen for 15 minutes. One that the server closed during its handshake raised a bare ``Exception``,
which failed the parent, and a failing parent cancels its children. ``Ends`` holds one subscription to flow-run
state events for the whole parent, opened again whenever it drops, and wakes the waiter of a run that reached a
final state; each slice also reads the run, so a lost event costs one slice at most.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from prefect import get_client, get_run_logger
from prefect.client.schemas.objects import StateType
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect.exceptions import PrefectHTTPStatusError

FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}


class Ends:
    """The ends of flow runs as they happen, for every run a waiter registered; ``async with`` listens."""

    def __init__(self) -> None:
        self._ended: dict[str, asyncio.Event] = {}
        self._listener: asyncio.Task | None = None

    async def __aenter__(self) -> Ends:
        self._listener = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener

    async def wait(self, run_id, timeout: float):
        """The run once it is final (read from the server); None when it has not ended within ``timeout`` s."""
        ended = self._ended.setdefault(str(run_id), asyncio.Event())
        if (run := await read_final(run_id)) is not None:
            return run
        try:
            await asyncio.wait_for(ended.wait(), timeout)
        except asyncio.TimeoutError:
            return await read_final(run_id)  # its event may have been lost while the stream was down
        delay = 0.1  # the end's event can come before a read sees the state
        for _ in range(8):
            if (run := await read_final(run_id)) is not None:
                return run
            await asyncio.sleep(delay)
            delay = min(2 * delay, 2.0)
        return None

    async def _listen(self) -> None:
        only_runs = EventFilter(event=EventNameFilter(prefix=["prefect.flow-run."]),
                                resource=EventResourceFilter(id_prefix=["prefect.flow-run."]))
        while True:
            try:
                async with get_events_subscriber(filter=only_runs) as events:
                    async for event in events:
                        kind = event.resource.get("prefect.state-type")
                        ended = self._ended.get(event.resource.id.rsplit(".", 1)[-1])
                        if kind and ended is not None and StateType(kind) in FINAL:
                            ended.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - Prefect's subscriber raises a bare Exception when the server
                # closes it during the handshake; the stream is opened again, and each slice's read covers the gap
                get_run_logger().warning("the flow-run event stream dropped (%s: %s); opening it again",
                                         type(e).__name__, e)
                await asyncio.sleep(1)


async def read_final(run_id):
    """The run when it is final, else None (also when the server cannot answer now: the next slice reads again)."""
    try:
        async with get_client() as client:
            run = await client.read_flow_run(run_id)
    except (httpx.TransportError, PrefectHTTPStatusError) as e:
        get_run_logger().warning("could not read child %s: %s", run_id, e)
        return None
    return run if run.state is not None and run.state.is_final() else None
