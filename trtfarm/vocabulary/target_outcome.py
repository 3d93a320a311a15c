"""What happened to one target in a run: built, up to date, skipped or failed, and why.

One ``TargetOutcome`` per target goes from the build job to the report; one ``RunRow`` per target and model leaves
the program as JSON (``trtfarm build --json``, the Prefect artifact). ``to_record`` / ``from_record`` are its stored
form (a run's ``outcomes.json``), which keeps the manifest's store key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from trtfarm.vocabulary.manifest import Manifest

Status = Literal["built", "up-to-date", "skipped", "failed"]
ReleaseAction = Literal["moved", "already", "kept", "refused", "recorded"]
# what a note beside an outcome's cause says: why the job built in full (said first), the key that signed a build, a
# timing cache that did not merge, a plan published before signing was on, where a farm child built it
NoteKind = Literal["full-build", "signed-by", "timing-cache", "unsigned", "built-on", "lost"]
LEADING: frozenset[NoteKind] = frozenset({"full-build"})  # said before the cause


@dataclass(frozen=True)
class Reason:
    """One part of why a target ended as it did: ``cause`` (the status's own reason) or a note of ``NoteKind``."""

    kind: Literal["cause"] | NoteKind
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ReleaseOutcome:
    """What a run did to one target's release pointer, as a value (``str()`` is the sentence people read).

    ``action``: ``moved`` (``old`` -> ``new``), ``already`` (the pointer was at ``new``), ``kept`` (a trial: the
    pointer stays at ``old``; ``why`` says which trial), ``refused`` (``why``: a tampered pointer or a signature
    refused, left for a person), ``recorded`` (read back from a run's stored outcomes written before this type:
    only its sentence, in ``why``). ``key`` is the pointer's store key; ``old`` and ``new`` are ``MODEL/GPU/BUILD``
    references (what ``trtfarm show`` takes), ``old`` is ``nothing`` for a first release. ``repaired``: a damaged
    pointer was repaired first, and this is what the repair said. ``held_by``: what keeps a ``kept`` pointer (the
    trial, or ``precision gate not judged``); ``fix``: what would release the plan.
    """

    action: ReleaseAction
    key: str = ""
    old: str = "nothing"
    new: str = ""
    why: str = ""
    repaired: str = ""
    channel: str = "stable"  # the channel whose pointer this is (``candidate``: the model declares promotion:)
    held_by: str = ""
    fix: str = ""

    @property
    def move(self) -> str:
        """``KEY: OLD -> NEW`` for a moved pointer, else ``""``."""
        return f"{self.key}: {self.old} -> {self.new}" if self.action == "moved" else ""

    @property
    def to(self) -> str:
        """`` to candidate`` for the candidate channel, else ``""`` (stable: the candidate follows it)."""
        return f" to {self.channel}" if self.channel != "stable" else ""

    def __str__(self) -> str:
        note = f"{self.repaired}; " if self.repaired else ""
        if self.action == "moved":
            return f"{note}released{self.to}: {self.move}"
        if self.action == "already":
            return f"{note}released: {self.key} (already at {self.old})"
        if self.action == "kept":
            fix = f"; fix: {self.fix}" if self.fix else ""
            return f"{note}not released ({self.why}): {self.key} stays at {self.old}{fix}"
        return f"{note}{self.why}"


@dataclass
class TargetOutcome:
    """What happened to one target in a run (the ``--json`` contract of ``trtfarm build``).

    ``manifest_key`` is the store key; ``manifest`` its URL, for people and the ``--json`` rows. ``published`` is the
    manifest itself when the run had it in hand (a build just published it, or planning read it), so the report
    does not read it again. ``fix``: what would let this machine build a skipped target (what to install, what
    it lacks), said apart from the ``reason`` that ends with it, so a view groups skips by it without parsing text.
    ``cause`` is why the target has its status; ``notes`` what steps after it said (``note``). Both stay apart, typed
    (``reasons``), and are joined only where text leaves: ``reason``, the ``--json`` field.
    """

    target: str
    status: Status
    cause: str = ""
    manifest: str | None = None
    build_s: float | None = None
    plan_bytes: int | None = None
    verification: dict = field(default_factory=dict)
    release: ReleaseOutcome | None = None
    manifest_key: str | None = None
    published: Manifest | None = None
    build_digest: str | None = None  # the build this outcome is of (None: not known, e.g. the precision gate refused)
    fix: str = ""
    notes: tuple[Reason, ...] = ()

    def note(self, kind: NoteKind, text: str) -> None:
        """Add what a later step says about this target (nothing for empty text)."""
        if text:
            self.notes = (*self.notes, Reason(kind, text))

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """Every part of why, in the order said: a leading note (a full build's why), the cause, the other notes."""
        cause = (Reason("cause", self.cause),) if self.cause else ()
        return (*(n for n in self.notes if n.kind in LEADING), *cause,
                *(n for n in self.notes if n.kind not in LEADING))

    @property
    def reason(self) -> str:
        """The reasons as one text (``; ``-joined), as ``--json`` and a run's stored outcomes carry it."""
        return "; ".join(r.text for r in self.reasons)

    @property
    def headline(self) -> str:
        """The first line of the first reason: what a one-line view shows."""
        first = self.reasons[:1]
        return first[0].text.splitlines()[0] if first and first[0].text else ""

    def to_json(self) -> dict:
        """``{target, status, reason, fix, manifest, build_s, plan_bytes, verification, release, released, held_by}``.

        ``released``: the pointer serves this plan (moved, or already); ``held_by``: what kept it (a trial, the
        precision gate), else None.
        """
        r = self.release
        return {"target": self.target, "status": self.status, "reason": self.reason, "fix": self.fix,
                "manifest": self.manifest, "build_s": self.build_s, "plan_bytes": self.plan_bytes,
                "verification": self.verification, "release": str(r or ""),
                "released": r is not None and r.action in ("moved", "already"),
                "held_by": (r.held_by or r.why) if r is not None and r.action == "kept" else None}

    def to_record(self) -> dict:
        """The stored form: ``to_json``, the manifest's store key, the build digest and the release outcome's fields.

        ``trtfarm status`` ties a failure to the build it was of by the digest.
        """
        return {**self.to_json(), "manifest_key": self.manifest_key, "build_digest": self.build_digest,
                "release_outcome": asdict(self.release) if self.release else None}

    @classmethod
    def from_record(cls, record: dict, store_uri: str) -> TargetOutcome:
        """An outcome read back from a run's ``outcomes.json`` in the store at ``store_uri``.

        Records written before the key was stored name only the manifest's URL: its key is the URL less the store's.
        """
        url, key = record.get("manifest"), record.get("manifest_key")
        if key is None and url and url.startswith(store_uri.rstrip("/") + "/"):
            key = url[len(store_uri.rstrip("/")) + 1:]
        release = ReleaseOutcome(**record["release_outcome"]) if record.get("release_outcome") else \
            ReleaseOutcome("recorded", why=record["release"]) if record.get("release") else None
        return cls(record["target"], record["status"], record.get("reason") or "", url, record.get("build_s"),
                   record.get("plan_bytes"), record.get("verification") or {}, release, key,
                   build_digest=record.get("build_digest"), fix=record.get("fix") or "")


@dataclass(frozen=True)
class RunRow:
    """One target of one model in a run: what ``trtfarm build`` prints and the farm's report table shows."""

    model: str
    outcome: TargetOutcome

    def to_json(self) -> dict:
        """``{model, target, status, reason, ..., release, released, held_by}`` (``TargetOutcome.to_json``)."""
        return {"model": self.model, **self.outcome.to_json()}


@dataclass(frozen=True)
class LostChild:
    """A farm child run lost to its host: where it ran, why, and what became of it (``farm run --wait`` prints it).

    ``resubmitted_as`` / ``to_pool``: the attempt that replaced it (None: it was not resubmitted); ``outcome``: how
    that attempt ended. ``to_json`` is the row of the run's lost-hosts artifact and of ``farm run --json``'s ``lost``.
    """

    lost: str
    flow_run_id: str | None
    worker: str | None
    pool: str
    why: str
    resubmitted_as: str | None
    to_pool: str | None
    outcome: str

    def to_json(self) -> dict:
        """``{lost, flow_run_id, worker, pool, why, resubmitted_as, to_pool, outcome}``."""
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict) -> LostChild:
        """A row read back from the run's lost-hosts artifact."""
        return cls(**{k: row.get(k) for k in cls.__dataclass_fields__})
