"""Report a run as a Prefect table artifact."""

from __future__ import annotations

import tempfile
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.build import TargetOutcome
from trtfarm.report import write_report
from trtfarm.store import open_store


@task(cache_policy=NO_CACHE)
def report_outcomes(model: str, outcomes: list[TargetOutcome], store_uri: str | None = None) -> None:
    """A table artifact (one row per target), and the markdown report with charts, also written to the store."""
    rows = [{"target": o.target, "status": o.status, "reason": o.reason,
             "build_s": o.build_s, "plan_bytes": o.plan_bytes,
             "verification": ", ".join(f"{k}={v}" for k, v in o.verification.items()),
             "manifest": o.manifest or ""} for o in outcomes]
    key = "".join(c if c.isalnum() else "-" for c in f"build-matrix-{model}".lower())
    create_table_artifact(rows, key=key, description=f"trtfarm build matrix for {model}")
    if store_uri is None:
        return
    run = str(flow_run.get_id() or "local")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_report(open_store(store_uri), model, run, [o.to_json() for o in outcomes], Path(tmp))
        create_markdown_artifact(path.read_text(), key=f"{key}-report", description=f"trtfarm report for {model}")
