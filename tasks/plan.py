"""Tasks that decide what a run builds."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.build import retry_infrastructure_only
from trtfarm.planning.plan import ExportPlan, plan_export
from trtfarm.store import open_store
from trtfarm.triggers.registry import ExportRef, latest_exports, resolve_model


@task(cache_policy=NO_CACHE)
def find_exports(store_uri: str, model: str | None) -> list[ExportRef]:
    """The exports a run builds: the named one, or the latest export of every registered model."""
    if model and "://" not in model and Path(model).is_file():
        return [ExportRef(str(Path(model)), "")]
    store = open_store(store_uri)
    return [resolve_model(store, model)] if model else latest_exports(store)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def plan_model(store_uri: str, export: ExportRef, targets_file: str, targets: list[str], profiles: list[dict],
               name: str | None, precision: str | None, force: bool, farm: bool,
               refit: bool = False) -> ExportPlan:
    """Everything decided for one model before any build (with ``refit``: which released plans can be refitted)."""
    return plan_export(store_uri, export, targets_file=targets_file, targets=targets, profiles=profiles, name=name,
                       precision=precision, force=force, farm=farm, refit=refit)
