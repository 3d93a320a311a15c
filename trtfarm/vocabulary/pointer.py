"""A release pointer's schema, and a pointer as a run read it (with its ETag), carried from planning to the release.

The pointers themselves are read and moved by ``trtfarm.publishing.release``; the types live here so a build job can
carry what planning read (``SeenPointer``) and the release move starts its compare-and-swap from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ReleaseEvent(BaseModel):
    """One move of a pointer."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["release", "rollback", "forced", "refresh"]
    manifest: str
    onnx_digest: str
    exported_at: str | None
    at: str
    by: str
    reason: str


class ReleasePointer(BaseModel):
    """What a serving host of (model, GPU, toolchain version) should run."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = 1
    model: str
    gpu: str
    toolchain: str
    manifest: str
    plan_key: str
    plan_sha256: str
    onnx_digest: str
    build_digest: str
    exported_at: str | None
    history: list[ReleaseEvent] = Field(default_factory=list)
    version: int = Field(0, description="the release version: each move takes the last plus one")
    claim: dict | None = Field(None, description="the signed release (a bundle; signing/release_claim.py), or None "
                                                 "when the move was not signed")

    @property
    def identity(self) -> str:
        """``model/gpu/toolchain``, as messages name a release."""
        return f"{self.model}/{self.gpu}/{self.toolchain}"

    @property
    def current(self) -> ReleaseEvent:
        """The move that put the pointer where it is."""
        return self.history[-1]


class SeenPointer(BaseModel):
    """A release pointer as planning read it: the pointer (None: there was none) and the ETag a swap must name.

    It may be stale by the time a job publishes; the release's compare-and-swap then fails and reads it afresh.
    """

    model_config = ConfigDict(frozen=True)
    key: str
    pointer: ReleasePointer | None
    etag: str | None
