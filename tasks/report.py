"""Report a run as a Prefect table artifact."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from trtfarm.build import TargetOutcome


@task(cache_policy=NO_CACHE)
def report_outcomes(model: str, outcomes: list[TargetOutcome]) -> None:
    """One row per target: status, reason, build time, plan size, verification, manifest."""
    rows = [{"target": o.target, "status": o.status, "reason": o.reason,
             "build_s": o.build_s, "plan_bytes": o.plan_bytes,
             "verification": ", ".join(f"{k}={v}" for k, v in o.verification.items()),
             "manifest": o.manifest or ""} for o in outcomes]
    key = "".join(c if c.isalnum() else "-" for c in f"build-matrix-{model}".lower())
    create_table_artifact(rows, key=key, description=f"trtfarm build matrix for {model}")
