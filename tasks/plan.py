"""Tasks that decide what a run builds."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from trtfarm.buildspec import spec_for_model, spec_precision
from trtfarm.fleet import ResolvedTarget, load_fleet, select_targets
from trtfarm.identity import model_name_from_path
from trtfarm.matrix import ModelSource, TargetPlan, local_capabilities, model_source, plan_targets, with_precision
from trtfarm.profiles import Profile
from trtfarm.store import open_store


@task(cache_policy=NO_CACHE)
def resolve_targets(targets_file: str, ids: list[str]) -> list[ResolvedTarget]:
    """Load gpu_targets.yaml and pick the requested targets."""
    return select_targets(load_fleet(targets_file), ids)


@task(cache_policy=NO_CACHE)
def prepare_model(path: str, name: str | None) -> ModelSource:
    """Check the ONNX and compute its digests."""
    return model_source(Path(path), name or model_name_from_path(Path(path)))


@task(cache_policy=NO_CACHE)
def plan_matrix(model: ModelSource, targets: list[ResolvedTarget], profiles: list[Profile]) -> list[TargetPlan]:
    """Every target's build digest, key, and whether this machine serves it."""
    return plan_targets(model, model.plan_digest, targets, profiles, local_capabilities())


@task(cache_policy=NO_CACHE)
def convert_precision(store_uri: str, model: ModelSource, mode: str | None) -> ModelSource:
    """The precision step, once per model and recipe (reused from the store); raises GateFailed."""
    spec, _ = spec_for_model(model.path)
    recipe, calibration, heldout = spec_precision(model.path, spec, mode)
    return with_precision(open_store(store_uri), model, recipe, calibration, heldout)
