"""The ``build-target`` flow: build one plan on a worker of its target, publish it, report the outcome."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.requests import TargetRequest
from tasks.build import build_and_publish
from tasks.plan import convert_precision, plan_matrix, prepare_model, resolve_targets
from trtfarm.build import TargetOutcome
from trtfarm.errors import UserInputError
from trtfarm.profiles import Profile


@flow(name="build-target")
def build_target(request: TargetRequest) -> list[dict]:
    """Build ``request.targets`` (one build digest) and publish a manifest for each."""
    logger = get_run_logger()
    profiles = [Profile.model_validate(p) for p in request.profiles]
    targets = resolve_targets(request.targets_file, request.targets)
    model = convert_precision(request.store, prepare_model(request.model_path, request.name), request.precision)
    group = plan_matrix(model, targets, profiles)
    if {p.build_digest for p in group} != {request.build_digest}:
        raise UserInputError(f"build digest drifted: expected {request.build_digest[:12]}, this worker computes "
                             f"{sorted(p.build_digest[:12] for p in group)} (different fleet file or model bytes?)")
    try:
        outcomes = build_and_publish(request.store, model, group, profiles)
    except Exception as err:  # user errors and exhausted infrastructure retries: this target failed, others go on
        logger.error("%s failed: %s", ", ".join(request.targets), err)
        outcomes = [TargetOutcome(t, "failed", str(err)) for t in request.targets]
    return [o.to_json() for o in outcomes]
