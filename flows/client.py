"""The farm's Prefect client calls for the command line: which server, sync the work pools, submit and wait for a run.

Prefect's exceptions are translated here, once, into trtfarm's kinds: a deployment the server does not have is a
``UserInputError`` naming the fix; a server that does not answer is ``ServerUnavailable`` (exit 3) and one that
answers but fails or refuses a request ``ServerFailed`` (exit 1), both naming the server
(``trtfarm.workers.server.server_failure``). The command line only parses arguments and prints what these return.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.target_outcome import LostChild, RunRow
from trtfarm.workers.server import server_failure


def prefect_api_url() -> str | None:
    """``$PREFECT_API_URL``, else the active Prefect profile's."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def _server_errors() -> tuple[type[BaseException], ...]:
    """What a Prefect client raises when its server fails or refuses: HTTP status errors, transport errors."""
    import httpx
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    return ObjectNotFound, PrefectHTTPStatusError, httpx.HTTPError, OSError


async def sync_work_pools(desired: list, apply: bool = True, templates: dict[str, dict] | None = None) -> list:
    """Create missing pools, fix concurrency limits, add the toolchain queues; ``apply=False`` only reports drift.

    ``templates[pool]`` is the base job template for a new pool (Kubernetes); else the worker type's default.
    """
    try:
        return await _sync_work_pools(desired, apply, templates or {})
    except _server_errors() as e:  # the server is the problem: say which one, by its kind
        raise server_failure(prefect_api_url(), "sync the work pools", e) from e


async def _sync_work_pools(desired: list, apply: bool, templates: dict[str, dict]) -> list:
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.workers.utilities import get_default_base_job_template_for_infrastructure_type

    from trtfarm.workers.pools import PoolState, pool_drift

    async with get_client() as client:
        server = [PoolState(p.name, p.type, p.concurrency_limit,
                            tuple(q.name for q in await client.read_work_queues(work_pool_name=p.name)))
                  for p in await client.read_work_pools()]
        drift = pool_drift(desired, server)
        if not apply:
            return drift
        specs = {d.name: d for d in desired}
        have = {p.name: p for p in server}
        for row in drift:
            spec = specs.get(row.pool)
            if row.action == "create":
                template = templates.get(spec.name) or await get_default_base_job_template_for_infrastructure_type(
                    spec.type) or {}
                await client.create_work_pool(WorkPoolCreate(
                    name=spec.name, type=spec.type, description=spec.description,
                    concurrency_limit=spec.concurrency_limit, base_job_template=template))
            elif row.action.startswith("update"):
                await client.update_work_pool(spec.name, WorkPoolUpdate(concurrency_limit=spec.concurrency_limit,
                                                                        description=spec.description))
            if spec is not None and (row.action == "create" or row.action.startswith("update")):
                existing = set(have[spec.name].queues) if spec.name in have else set()
                for queue in sorted(set(spec.queues) - existing):
                    await client.create_work_queue(name=queue, work_pool_name=spec.name,
                                                   description=f"builds with {queue}")
    return drift


async def sync_lost_host_automation() -> str:
    """Create (or bring back to trtfarm's) the automation that crashes a run whose host is lost; returns what it did."""
    from prefect import get_client

    from flows.heartbeats import sync_automation

    try:
        async with get_client() as client:
            return await sync_automation(client)
    except _server_errors() as e:
        raise server_failure(prefect_api_url(), "create the lost-host automation", e) from e


@dataclass(frozen=True)
class MatrixRun:
    """A build-matrix run as the command line sees it: its id and final state, one row per target, lost children.

    ``flow_run_id`` is None when no run was started (everything was published already). ``to_json`` is
    ``farm run --json``'s document.
    """

    flow_run_id: str | None
    state: str
    message: str
    rows: list[RunRow] = field(default_factory=list)
    lost: list[LostChild] = field(default_factory=list)

    def to_json(self) -> dict:
        """``{flow_run_id, state, message, outcomes, lost}``."""
        return {"flow_run_id": self.flow_run_id, "state": self.state, "message": self.message,
                "outcomes": [r.to_json() for r in self.rows], "lost": [r.to_json() for r in self.lost]}


async def submit_matrix(deployment: str, request, wait: bool) -> MatrixRun:
    """A build-matrix run, submitted (and with ``wait``, waited for): its state, outcome rows and lost children.

    Rows come from the run's reports in the store, the children it lost to their hosts from its
    ``build-matrix-lost-hosts`` artifact.

    Only the fields set on ``request`` are sent: the rest take the farm's defaults (the workers' environment).
    """
    from prefect.exceptions import ObjectNotFound

    api = prefect_api_url()
    try:
        return await _submit_matrix(deployment, request, wait)
    except ObjectNotFound as e:
        raise UserInputError(f"deployment {deployment!r} is not on the Prefect server at {api}: deploy it (`prefect "
                             "deploy --all` in the trtfarm checkout) or name another with --deployment") from e
    except _server_errors() as e:  # the server went away or refused the run: say which server, in one line
        raise server_failure(api, "start the run", e) from e


async def _submit_matrix(deployment: str, request, wait: bool) -> MatrixRun:
    from prefect.deployments import run_deployment
    from prefect.flow_runs import wait_for_flow_run

    from trtfarm.reports.stored_outcomes import run_outcomes
    from trtfarm.store import open_store

    run = await run_deployment(deployment, parameters={"request": request.model_dump(mode="json", exclude_unset=True)},
                               timeout=0, as_subflow=False)
    if not wait:
        return MatrixRun(str(run.id), run.state.type.value if run.state else "SCHEDULED", "")
    final = await wait_for_flow_run(run.id, timeout=None)
    store = open_store(request.store)  # yours (--store / $TRTFARM_STORE) must be the farm's to read its reports
    rows = [RunRow(m, o) for m, outcomes in run_outcomes(store, str(run.id)).items() for o in outcomes]
    state = final.state
    return MatrixRun(str(run.id), state.type.value if state else "UNKNOWN", (state.message or "") if state else "",
                     rows, await _lost_children(run.id))


async def _lost_children(flow_run_id) -> list[LostChild]:
    """The rows of the run's lost-hosts artifact (none when it lost no child)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from tasks.report import LOST_ARTIFACT

    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]), key=ArtifactFilterKey(any_=[LOST_ARTIFACT])))
    data = found[0].data if found else None
    return [LostChild.from_json(r) for r in (json.loads(data) if isinstance(data, str) else list(data or []))]
