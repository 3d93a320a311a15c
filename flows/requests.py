"""Typed flow parameters (the Prefect UI renders these as forms; bad values are rejected at run creation)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trtfarm.fleet import DEFAULT_TARGETS_FILE
from trtfarm.precision.recipe import Mode
from trtfarm.store import DEFAULT_STORE

ProfileText = dict[str, str]  # {"input_ids": "1x16:16x128:32x512", ...}


class MatrixRequest(BaseModel):
    """Build one model for every (or the named) target of the fleet."""

    model_path: str = Field(description="path to the ONNX export (farm.yaml beside it is read)")
    name: str | None = Field(None, description="model name in the store (default: farm.yaml name, else file name)")
    targets: list[str] = Field(default_factory=list, description="target ids (default: farm.yaml, else all)")
    profiles: list[ProfileText] = Field(default_factory=list, description="optimization profiles (default: farm.yaml)")
    precision: Mode | None = Field(None, description="precision mode (default: farm.yaml's recipe)")
    store: str = Field(DEFAULT_STORE, description="artifact store: a path, file:// or s3://bucket/prefix")
    targets_file: str = Field(DEFAULT_TARGETS_FILE, description="the fleet's gpu_targets.yaml")


class TargetRequest(BaseModel):
    """Build one plan and publish it for the targets that share it (one compatibility class)."""

    model_path: str
    name: str
    targets: list[str] = Field(min_length=1)
    build_digest: str = Field(description="what the parent computed; the child refuses to build anything else")
    profiles: list[ProfileText] = Field(default_factory=list)
    precision: Mode | None = None
    store: str = DEFAULT_STORE
    targets_file: str = DEFAULT_TARGETS_FILE
