"""Report a run as Prefect artifacts: the run's table, and each model's report with its charts inline."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm.building.outcome import TargetOutcome
from trtfarm.store import open_store
from trtfarm.validation.report import artifact_markdown, write_report


def has_news(statuses) -> bool:
    """True when a model's run built or failed something (it gets a full report); else it is all up to date."""
    return any(s in ("built", "failed") for s in statuses)


def _artifact_key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())


@task(cache_policy=NO_CACHE)
def report_outcomes(model: str, outcomes: list[TargetOutcome], store_uri: str | None = None) -> None:
    """The model's full report (markdown, charts, HTML, outcomes) in the store and as a markdown artifact.

    The artifact carries its charts inline (data URIs) so the Prefect UI shows them. The flow calls it for models this
    run built or failed something for; ``report_run`` covers the rest.
    """
    if store_uri is None:
        return
    run, store = str(flow_run.get_id() or "local"), open_store(store_uri)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_report(store, model, run, [o.to_json() for o in outcomes], Path(tmp))
        create_markdown_artifact(artifact_markdown(store, model, run, path),
                                 key=_artifact_key(f"build-matrix-{model}-report"),
                                 description=f"trtfarm report for {model}")


@task(cache_policy=NO_CACHE)
def report_run(rows: list[dict], store_uri: str | None = None) -> None:
    """One table artifact for the run: model x target x status x build time x plan size x verification x manifest.

    Models with nothing new (all up to date or skipped) get only their ``outcomes.json`` in the store here; the
    others got a full report from ``report_outcomes``.
    """
    if store_uri is not None:
        store, run = open_store(store_uri), str(flow_run.get_id() or "local")
        by_model: dict[str, list[dict]] = {}
        for r in rows:
            by_model.setdefault(r["model"], []).append({k: v for k, v in r.items() if k != "model"})
        for model, outcomes in by_model.items():
            if not has_news(o["status"] for o in outcomes):
                store.put_if_absent(f"reports/{model}/{run}/outcomes.json", json.dumps(outcomes, indent=2).encode())
    table = [{"model": r["model"], "target": r["target"], "status": r["status"], "reason": r["reason"],
              "build_s": r["build_s"], "plan_MiB": round(r["plan_bytes"] / 2**20, 2) if r["plan_bytes"] else None,
              "verification": ", ".join(f"{k}={v}" for k, v in r["verification"].items()),
              "manifest": r["manifest"] or ""} for r in rows]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("built", "up-to-date", "skipped", "failed")}
    create_table_artifact(table, key="build-matrix", description="trtfarm build matrix: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n))
