"""A release pointer's schema, and a pointer as a run read it (with its ETag), carried from planning to the release.

The pointers themselves are read and moved by ``trtfarm.publishing.release``; the types live here so a build job can
carry what planning read (``SeenPointer``) and the release move starts its compare-and-swap from it.

Schema 2 added the release's ``version`` and its signed ``claim``. ``pointer_from_json`` upgrades a schema 1 pointer
(written before releases were signed) through ``_UPGRADES`` to an unsigned release of version 0, and refuses a
newer schema in one line: upgrade trtfarm (an older trtfarm must not read, let alone repair, what it cannot know).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import validation_problems

POINTER_SCHEMA = 2


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
    schema_version: Literal[2] = POINTER_SCHEMA
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
    version: int = Field(ge=0, description="the release version: each move takes the last plus one (0: a schema 1 "
                                           "pointer, never versioned)")
    claim: dict | None = Field(None, description="the signed release (a bundle; signing/release_claim.py), or None "
                                                 "when the move was not signed")

    @property
    def identity(self) -> str:
        """``model/gpu/toolchain``, as messages name a release."""
        return f"{self.model}/{self.gpu}/{self.toolchain}"

    @property
    def current(self) -> ReleaseEvent:
        """The pointer's last move, a refresh included (the move its signed claim names)."""
        return self.history[-1]

    @property
    def released(self) -> ReleaseEvent:
        """The move that put the current build here: the last release, rollback or forced move.

        A refresh (``trtfarm sign`` re-signing the same manifest) is no release: it never changes when, by whom or
        why the build was released. A history of refreshes only (written before releases were kept when a history
        is trimmed) gives its oldest refresh: the build has been released at least since then. An empty history
        raises ``IndexError``, as ``current`` does (every move trtfarm writes records an event).
        """
        return next((e for e in reversed(self.history) if e.action != "refresh"), self.history[0])


class PointerInvalid(ValueError):
    """Bytes that are not a release pointer this trtfarm can read (not JSON, fields missing or of the wrong type)."""


class PointerTooNew(UserInputError):
    """A pointer of a schema newer than this trtfarm's: the fix is to upgrade trtfarm, never to rewrite it."""


def _from_v1(doc: dict) -> dict:
    """Schema 1 -> 2: a pointer moved before releases were versioned and signed is an unsigned release, version 0.

    A schema 1 document never had ``version`` or ``claim``; one that carries them is not a schema 1 pointer.
    """
    newer = sorted({"version", "claim"} & doc.keys())
    if newer:
        raise PointerInvalid(f"schema 1 has no {' or '.join(newer)} (schema 2 fields)")
    return {**doc, "schema_version": 2, "version": 0, "claim": None}


_UPGRADES: dict[int, Callable[[dict], dict]] = {1: _from_v1}  # from_version -> the next version's document


def pointer_from_json(data: bytes | str, source: str = "release pointer") -> ReleasePointer:
    """Parse a pointer, upgrading older schemas; ``PointerTooNew`` for a newer one, ``PointerInvalid`` if damaged."""
    try:
        doc = json.loads(data)
        version = doc.get("schema_version")
    except (ValueError, AttributeError) as err:
        raise PointerInvalid(f"not a JSON object ({type(err).__name__})") from err
    if type(version) is not int:
        raise PointerInvalid("no schema_version" if version is None else f"schema_version {version!r} is not a number")
    if version > POINTER_SCHEMA:
        raise PointerTooNew(f"{source}: release pointer schema {version} is newer than this trtfarm understands "
                            f"({POINTER_SCHEMA}); upgrade trtfarm.")
    while version < POINTER_SCHEMA:
        if version not in _UPGRADES:
            raise PointerInvalid(f"schema {version} is no release pointer schema trtfarm ever wrote")
        doc, version = _UPGRADES[version](doc), version + 1
    try:
        return ReleasePointer.model_validate(doc)
    except ValidationError as err:
        raise PointerInvalid(validation_problems(err)) from err


class SeenPointer(BaseModel):
    """A release pointer as planning read it: the pointer (None: there was none) and the ETag a swap must name.

    It may be stale by the time a job publishes; the release's compare-and-swap then fails and reads it afresh.
    """

    model_config = ConfigDict(frozen=True)
    key: str
    pointer: ReleasePointer | None
    etag: str | None
