"""Tasks that decide what a run builds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.build import retry_infrastructure_only
from trtfarm.buildspec import spec_for_model, spec_precision
from trtfarm.fleet import ResolvedTarget, load_fleet, select_targets
from trtfarm.identity import model_name_from_path
from trtfarm.matrix import ModelSource, TargetPlan, local_capabilities, model_source, plan_targets, with_precision
from trtfarm.profiles import Profile
from trtfarm.registry import ExportRef, latest_exports, resolve_model
from trtfarm.runplan import ExportPlan, local_copy, plan_export
from trtfarm.store import open_store


@task(cache_policy=NO_CACHE)
def resolve_targets(targets_file: str, ids: list[str]) -> list[ResolvedTarget]:
    """Load gpu_targets.yaml and pick the requested targets."""
    return select_targets(load_fleet(targets_file), ids)


@task(cache_policy=NO_CACHE)
def prepare_model(path: str, name: str | None, source_uri: str | None = None) -> ModelSource:
    """Check the ONNX and compute its digests (``source_uri``: the export it was fetched from)."""
    model = model_source(Path(path), name or model_name_from_path(Path(path)))
    return replace(model, source_uri=f"{source_uri}/model.onnx") if source_uri else model


@task(cache_policy=NO_CACHE)
def plan_matrix(model: ModelSource, targets: list[ResolvedTarget], profiles: list[Profile],
                farm: bool = False) -> list[TargetPlan]:
    """Every target's build digest and key; in local mode also whether this machine serves it."""
    return plan_targets(model, model.plan_digest, targets, profiles, None if farm else local_capabilities())


@task(cache_policy=NO_CACHE)
def find_exports(store_uri: str, model: str | None) -> list[ExportRef]:
    """The exports a run builds: the named one, or the latest export of every registered model."""
    if model and "://" not in model and Path(model).is_file():
        return [ExportRef(str(Path(model)), "")]
    store = open_store(store_uri)
    return [resolve_model(store, model)] if model else latest_exports(store)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
def fetch_model(export: ExportRef) -> Path:
    """A local copy of the export folder (checked against export.json); a local ONNX path is used as it is."""
    return local_copy(export)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5, retry_condition_fn=retry_infrastructure_only)
def plan_model(store_uri: str, export: ExportRef, targets_file: str, targets: list[str], profiles: list[dict],
               name: str | None, precision: str | None, force: bool, farm: bool,
               refit: bool = False) -> ExportPlan:
    """Everything decided for one model before any build (with ``refit``: which released plans can be refitted)."""
    return plan_export(store_uri, export, targets_file=targets_file, targets=targets, profiles=profiles, name=name,
                       precision=precision, force=force, farm=farm, refit=refit)


@task(cache_policy=NO_CACHE)
def convert_precision(store_uri: str, model: ModelSource, mode: str | None) -> ModelSource:
    """The precision step, once per model and recipe (reused from the store); raises GateFailed."""
    spec, _ = spec_for_model(model.path)
    recipe, calibration, heldout = spec_precision(model.path, spec, mode)
    return with_precision(open_store(store_uri), model, recipe, calibration, heldout)
