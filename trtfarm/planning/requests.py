"""Typed flow parameters (the Prefect UI renders these as forms; bad values are rejected at run creation).

``precision`` is an enum in the parameter schema, so the server refuses an unknown mode when the run is created.
Target ids are checked against the fleet file before the flow does any work (``MatrixRequest.check_targets``); the
deployment's schema also lists the ids known when it was deployed, so the UI offers them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trtfarm.errors import UserInputError
from trtfarm.precision.recipe import Mode
from trtfarm.project.fleet_file import default_targets_file, load_fleet
from trtfarm.store import default_store_uri as default_store
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.job import ProfileText


def _known_target_ids(schema: dict) -> None:
    """Offer the fleet's target ids in the parameter form (the fleet file as found at deploy time)."""
    try:
        ids = [t.id for t in load_fleet(default_targets_file()).targets]
    except (UserInputError, OSError):  # no readable fleet here: a free-form list, checked by the flow
        return
    schema["items"] = {"type": "string", "enum": ids}


class MatrixRequest(BaseModel):
    """Build models for every (or the named) target of the fleet."""

    model: str | None = Field(None, description="a registered model name (its latest export), name@export_id, an "
                              "export folder URI (s3://... or file://...), or a local ONNX path. Empty: the latest "
                              "export of every registered model (the nightly run)")
    targets: list[str] = Field(default_factory=list, json_schema_extra=_known_target_ids,
                               description="target ids (default: farm.yaml's, else all)")
    precision: Mode | None = Field(None, description="precision mode (default: farm.yaml's recipe)")
    force: bool = Field(False, description="rebuild targets that are already published (the published manifest "
                        "is kept; the report says whether the rebuild matched it)")
    verify_store: bool = Field(False, description="re-hash each published plan before calling it up to date "
                               "(a damaged one is rebuilt); by default only its size is checked")
    refit: bool = Field(False, description="new weights, same graph: refit each released refittable plan instead of "
                        "rebuilding it (others are rebuilt, and the report says why)")
    calibration: str | None = Field(None, description="calibration .npz for int8/fp8 (default: farm.yaml's, else "
                                    "calib.npz beside the model); a local build's path")
    heldout: str | None = Field(None, description="held-out .npz for the accuracy gate (default: farm.yaml's, else "
                                "heldout.npz beside the model); a local build's path")
    max_memory: int | None = Field(None, ge=1, description="bytes the precision step may hold (default 4 GiB): it "
                                   "gates on as many samples as fit, and refuses when not one does")
    unchecked_modelopt: bool = Field(False, description="run the precision step on a ModelOpt, onnxruntime or "
                                     "Polygraphy other than the versions its workarounds were compared with "
                                     "(refused otherwise); the step's record and each plan's manifest say so")
    release: bool | None = Field(None, description="move the release pointers: true for any recipe, false for none; "
                                 "default: only for the model's declared recipe (farm.yaml's precision, else fp32)")
    name: str | None = Field(None, description="model name in the store (default: farm.yaml name, else the "
                                 "folder's name for a model.onnx, else the file's stem)")
    profiles: list[ProfileText] = Field(default_factory=list, description="optimization profiles (default: farm.yaml)")
    store: str = Field(default_factory=default_store, description="artifact store: a path, file:// or s3://bucket/prefix")
    targets_file: str = Field(default_factory=default_targets_file, description="the fleet's gpu_targets.yaml")
    dispatch: Literal["auto", "local", "farm"] = Field(
        "auto", description="farm: one child run per build on its target's work pool; local: in this process; "
        "auto: farm when this run came from a deployment")
    child_timeout_s: int = Field(3600, ge=10, description="cancel a child build run that takes longer than this")
    child_pending_limit_s: int = Field(120, ge=10, description="crash and resubmit a child build run that stays "
                                       "Pending longer than this once the worker that took it is gone (a process "
                                       "start took 11-23 s at p95 in the soaks on a loaded 2-core machine)")
    wait_for_workers: bool = Field(False, description="queue builds for pools with no online worker (default: skip "
                                   "them, saying why; the next run builds them)")

    def check_targets(self) -> tuple[Fleet, list[ResolvedTarget]]:
        """The run's fleet and its targets, read and resolved once; ``UserInputError`` names unknown target ids."""
        fleet = load_fleet(self.targets_file)
        return fleet, select_targets(fleet, self.targets or None)


class PromoteRequest(BaseModel):
    """Promote every candidate whose gates hold (the hourly promote-candidates run)."""

    model_config = ConfigDict(defer_build=True)  # (its schema is built where first used: no build uses it)
    models: list[str] = Field(default_factory=list, description="model names (default: every model with a "
                              "candidate pointer in the store)")
    store: str = Field(default_factory=default_store, description="artifact store: a path, file:// or s3://bucket/prefix")
    targets_file: str = Field(default_factory=default_targets_file, description="the fleet's gpu_targets.yaml (each "
                              "target's release_on, the signing key)")
