"""Start a build-matrix run on the farm and, if asked, wait for it and read its outcomes from the store."""

from __future__ import annotations

from prefect.deployments import run_deployment
from prefect.flow_runs import wait_for_flow_run

from flows.requests import MatrixRequest
from trtfarm.report import run_outcomes
from trtfarm.store import open_store


async def submit_matrix(deployment: str, request: MatrixRequest, wait: bool) -> tuple[str, str, str, list[dict]]:
    """``(flow run id, state, state message, outcome rows)``; rows come from the run's reports in the store.

    Only the fields set on ``request`` are sent: the rest take the farm's defaults (the workers' environment).
    """
    run = await run_deployment(deployment, parameters={"request": request.model_dump(mode="json", exclude_unset=True)},
                               timeout=0, as_subflow=False)
    if not wait:
        return str(run.id), run.state.type.value if run.state else "SCHEDULED", "", []
    final = await wait_for_flow_run(run.id, timeout=None)
    store = open_store(request.store)  # yours (--store / $TRTFARM_STORE) must be the farm's to read its reports
    rows = [{"model": model, **r} for model, outcomes in run_outcomes(store, str(run.id)).items() for r in outcomes]
    state = final.state
    return str(run.id), state.type.value if state else "UNKNOWN", (state.message or "") if state else "", rows
