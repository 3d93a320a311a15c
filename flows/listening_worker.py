"""The Prefect worker ``trtfarm worker`` runs: Prefect's own ``prefect worker start``, taking runs as announced.

Its process worker takes a run the moment the server says one was scheduled in its pool, not only on its next poll.
Prefect 3.9's workers only poll (every ``PREFECT_WORKER_QUERY_SECONDS``, 1 s under ``trtfarm worker``, with Prefect's
+-30 % jitter), so each of the two runs between an export landing and its release waited 0.1-1.3 s to be taken
(docs/measurements.md). Here the worker also subscribes to the server's ``prefect.flow-run.Scheduled`` events (the
events websocket the parent already uses to see its children end) and, for one whose related work pool is its pool
(and work queue one of its queues, if it serves some), runs the same ``get_and_submit_flow_runs`` a poll runs. Two
takings of one run are Prefect's to refuse, as for two polls: the run is submitted once. The poll stays as it was:
an event that is lost or late costs what it cost before, and a subscription that fails or is closed is said once and
made again (1 s, then up to a minute apart), the worker polling meanwhile.

This process is ``python -m prefect`` with one difference: ``ListeningProcessWorker`` is registered under the
``process`` worker type in this process only, so the command line's ``worker start --type process`` starts it. Every
option, signal and shutdown of Prefect's command stays Prefect's.
"""

from __future__ import annotations

import sys
import warnings
from datetime import datetime, timezone
from typing import Any

import anyio
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter
from prefect.workers.process import ProcessWorker

SCHEDULED = "prefect.flow-run.Scheduled"


def announces(event: Any, pool: str, queues: set[str]) -> bool:
    """Whether ``event`` says a run was scheduled in ``pool`` (and one of ``queues``, when the worker serves some)."""
    if event.event != SCHEDULED:
        return False
    roles = {(r.role, r.get("prefect.resource.name")) for r in event.related}
    return ("work-pool", pool) in roles and (not queues or any(("work-queue", q) in roles for q in queues))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Prefect warns that the type `process` now names this class: it is meant to

    class ListeningProcessWorker(ProcessWorker):
        """Prefect's process worker, that also takes a run when the server announces it in its pool."""

        async def start(self, run_once: bool = False, with_healthcheck: bool = False, printer: Any = print) -> None:
            """Prefect's worker, and beside it (not for a single pass) the subscription to announced runs."""
            if run_once:
                return await super().start(run_once=run_once, with_healthcheck=with_healthcheck, printer=printer)
            async with anyio.create_task_group() as group:
                group.start_soon(self._take_announced_runs)
                try:
                    await super().start(run_once=run_once, with_healthcheck=with_healthcheck, printer=printer)
                finally:
                    group.cancel_scope.cancel()
            return None

        async def _take_announced_runs(self) -> None:
            while self._runs_task_group is None or self._work_pool is None:  # set up and synced with the server
                await anyio.sleep(0.05)
            wait_s = 1.0
            while True:  # the poll goes on meanwhile: it is how runs were taken before
                listen = EventFilter(event=EventNameFilter(name=[SCHEDULED]),
                                     occurred=EventOccurredFilter(since=datetime.now(timezone.utc)))
                try:
                    async with get_events_subscriber(filter=listen, reconnect_on_clean_close=True) as events:
                        async for event in events:
                            wait_s = 1.0
                            if announces(event, self._work_pool_name, self._work_queues):
                                await self._take()
                except Exception as exc:  # noqa: BLE001 - the server restarts, a proxy drops the socket
                    if wait_s == 1.0:
                        self._logger.warning(f"not listening for scheduled runs ({type(exc).__name__}: {exc}); "
                                             "runs are taken on the worker's poll until it listens again")
                await anyio.sleep(wait_s)
                wait_s = min(wait_s * 2, 60.0)

        async def _take(self) -> None:
            try:
                await self.get_and_submit_flow_runs()
            except Exception as exc:  # noqa: BLE001 - as a failed poll: the next one retries
                self._logger.debug(f"taking an announced run failed: {exc}")


def main() -> None:
    """Prefect's command line, as ``python -m prefect``, with this module's worker under the ``process`` type."""
    from prefect.cli import app

    sys.argv = ["prefect", *sys.argv[1:]]
    app()


if __name__ == "__main__":
    main()
