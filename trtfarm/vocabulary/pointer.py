"""A release pointer's schema, and a pointer as a run read it (with its ETag), carried from planning to the release.

The pointers themselves are read and moved by ``trtfarm.publishing.release``; the types live here so a build job can
carry what planning read (``SeenPointer``) and the release move starts its compare-and-swap from it.

Schema 2 added the release's ``version`` and its signed ``claim``; schema 3 its ``channel`` (release channels: a
candidate pointer carries the model's ``promotion`` policy), promotions in the history and a move's gate figures;
schema 4 each event's ledger sequence number and evidence (``trtfarm.releases``: the history is the channel's
ledger). ``pointer_from_json`` upgrades older schemas through ``_UPGRADES`` (schema 1: an unsigned release of version
0; schema 2: the stable channel; schema 3: events without sequence numbers, each one's place derived), and refuses a
newer schema in one line: upgrade trtfarm (an older trtfarm must not read, let alone repair, what it cannot know).
``to_json`` writes a stable pointer that uses nothing newer as schema 2, so serving hosts on an older trtfarm keep
pulling the models that declare no promotion.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import validation_problems
from trtfarm.vocabulary.promotion import Channel, Promotion

POINTER_SCHEMA = 4


class ReleaseEvent(BaseModel):
    """One move of a pointer."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["release", "rollback", "forced", "refresh", "promote"]
    manifest: str
    onnx_digest: str
    exported_at: str | None
    at: str
    by: str
    reason: str
    gates: dict[str, str] | None = Field(None, description="a promotion's gates as they stood: name -> verdict")
    seq: int | None = Field(None, description="the event's place in the channel's ledger: the version its move gave "
                                              "the pointer (None: written as schema 2; its place is derived)")
    evidence: list[str] | None = Field(None, description="what decided the move besides the ledger: the receipt that "
                                                         "rolled it back, the candidate event a promotion took")


class ReleasePointer(BaseModel):
    """What a serving host of (model, GPU, toolchain version) should run."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[4] = POINTER_SCHEMA
    channel: Channel = "stable"
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
    promotion: Promotion | None = Field(None, description="a candidate's promotion policy (farm.yaml's promotion:)")

    def to_json(self) -> bytes:
        """The pointer's bytes: schema 2 when it uses nothing newer (a stable pointer without promotions or evidence).

        Schema 2 drops the events' sequence numbers: a reader derives them from the version (``releases.ledger``).
        """
        doc = self.model_dump(mode="json")
        events = doc["history"]
        if self.channel == "stable" and self.promotion is None and \
                all(e["action"] != "promote" and e["gates"] is None and e["evidence"] is None for e in events):
            doc.pop("channel"), doc.pop("promotion")
            doc["schema_version"] = 2
            for e in events:  # schema 2 knows none of these: an older host refuses an event with more fields
                e.pop("gates"), e.pop("seq"), e.pop("evidence")
        return json.dumps(doc, indent=2).encode()

    @property
    def track(self) -> str:
        """``model/gpu/toolchain``, and ``#candidate`` for the candidate channel: what a host remembers it by."""
        return self.identity + ("" if self.channel == "stable" else f"#{self.channel}")

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


def _from_v2(doc: dict) -> dict:
    """Schema 2 -> 3: a pointer written before channels is the stable channel's."""
    newer = sorted({"channel", "promotion"} & doc.keys())
    if newer:
        raise PointerInvalid(f"schema 2 has no {' or '.join(newer)} (schema 3 fields)")
    return {**doc, "schema_version": 3}


def _from_v3(doc: dict) -> dict:
    """Schema 3 -> 4: events without sequence numbers or evidence (each event's place is derived from the version)."""
    return {**doc, "schema_version": 4}


# from_version -> the next version's document
_UPGRADES: dict[int, Callable[[dict], dict]] = {1: _from_v1, 2: _from_v2, 3: _from_v3}


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
