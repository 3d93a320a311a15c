"""The ``build-target`` flow: build one plan on a worker of its target, publish it, report the outcome.

A farm deploys it once per work pool (``build-target/<pool>``). It fails (with every target's reason in its state
message) when any target failed, so the parent reads the verdict from the run's state and the plans from the store.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from tasks.build import build_and_publish, refit_and_publish_plan
from tasks.plan import plan_model
from trtfarm.errors import TrtfarmError, UserInputError
from trtfarm.planning.requests import TargetRequest
from trtfarm.profiles.profile import Profile
from trtfarm.triggers.registry import ExportRef


class BuildFailed(TrtfarmError):
    """At least one target of this child failed; the message carries each reason."""


REFIT_UNAVAILABLE = "refit unavailable on this worker"


def _refit(request: TargetRequest, model, group, profiles):
    from trtfarm.toolchain.refitter import RefitUnavailable

    if len(group) != 1:
        raise UserInputError(f"a refit is for one target; got {request.targets}")
    try:
        outcome = refit_and_publish_plan(request.store, model, group[0], request.refit_of, profiles)
    except RefitUnavailable as err:  # the parent falls back to a full build for this target
        raise BuildFailed(f"{REFIT_UNAVAILABLE}: {err}") from err
    except Exception as err:
        raise BuildFailed(f"{request.targets[0]}: refit of {request.refit_of} failed: {err}") from err
    if outcome.status == "failed":
        raise BuildFailed(f"{outcome.target}: {outcome.reason}")
    return outcome


@flow(name="build-target")
def build_target(request: TargetRequest) -> list[dict]:
    """Build ``request.targets`` (one build digest) and publish a manifest for each."""
    logger = get_run_logger()
    profiles = [Profile.model_validate(p) for p in request.profiles]
    # the parent's planning step, repeated here on the worker (force: no manifest lookups; local capabilities)
    planned = plan_model(request.store, ExportRef(request.model, request.name), request.targets_file,
                         request.targets, request.profiles, request.name, request.precision, True, False)
    if planned.model is None:  # the precision gate refused the recipe
        raise BuildFailed("; ".join(f"{o.target}: {o.reason}" for o in planned.outcomes.values()))
    model, group = planned.model, planned.plans
    if {p.build_digest for p in group} != {request.build_digest}:
        raise UserInputError(f"build digest drifted: expected {request.build_digest[:12]}, this worker computes "
                             f"{sorted(p.build_digest[:12] for p in group)} (different fleet file or model bytes?)")
    if unservable := [f"{p.target.id}: {p.skip_reason}" for p in group if p.skip_reason]:
        raise UserInputError("this worker cannot build " + "; ".join(unservable) + " (start it with `trtfarm "
                             "worker --pool`, which checks the machine first)")
    if request.refit_of:
        return [_refit(request, model, group, profiles).to_json()]
    try:
        outcomes = build_and_publish(request.store, model, group, profiles)
    except Exception as err:  # user errors and exhausted infrastructure retries: this target failed, others go on
        logger.error("%s failed: %s", ", ".join(request.targets), err)
        raise BuildFailed(f"{', '.join(request.targets)}: {err}") from err
    failed = [f"{o.target}: {o.reason}" for o in outcomes if o.status == "failed"]
    if failed:
        raise BuildFailed("; ".join(failed))
    return [o.to_json() for o in outcomes]
