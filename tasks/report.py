"""Report a run as Prefect artifacts: the run's table, and each model's report with its charts inline."""

from __future__ import annotations

import tempfile
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.pipeline import store_reports
from trtfarm.reports.report import artifact_markdown
from trtfarm.store import open_store


def _artifact_key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())


@task(cache_policy=NO_CACHE)
def report_run(rows: list[dict], store_uri: str) -> None:
    """The run's reports in the store (``store_reports``) and as Prefect artifacts.

    Each model this run built or failed something for gets its full report as a markdown artifact, charts inline
    (data URIs) so the Prefect UI shows them; the run gets one table: model x target x status x build time x plan
    size x verification x manifest.
    """
    store, run = open_store(store_uri), str(flow_run.get_id() or "local")
    with tempfile.TemporaryDirectory(prefix="trtfarm-report-") as out:
        for model, report_md in store_reports(store, run, rows, Path(out)).items():
            if report_md is not None:
                create_markdown_artifact(artifact_markdown(store, model, run, report_md),
                                         key=_artifact_key(f"build-matrix-{model}-report"),
                                         description=f"trtfarm report for {model}")
    table = [{"model": r["model"], "target": r["target"], "status": r["status"], "reason": r["reason"],
              "build_s": r["build_s"], "plan_MiB": round(r["plan_bytes"] / 2**20, 2) if r["plan_bytes"] else None,
              "verification": ", ".join(f"{k}={v}" for k, v in r["verification"].items()),
              "manifest": r["manifest"] or ""} for r in rows]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("built", "up-to-date", "skipped", "failed")}
    create_table_artifact(table, key="build-matrix", description="trtfarm build matrix: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n))
