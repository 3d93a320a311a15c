"""What happened to one target in a run: built, up to date, skipped or failed, and why.

One ``TargetOutcome`` per target goes from the build job to the report; one ``RunRow`` per target and model leaves
the program as JSON (``trtfarm build --json``, the Prefect artifact). ``to_record`` / ``from_record`` are its stored
form (a run's ``outcomes.json``), which keeps the manifest's store key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trtfarm.vocabulary.manifest import Manifest

Status = Literal["built", "up-to-date", "skipped", "failed"]


@dataclass
class TargetOutcome:
    """What happened to one target in a run (the ``--json`` contract of ``trtfarm build``).

    ``manifest_key`` is the store key; ``manifest`` its URL, for people and the ``--json`` rows. ``published`` is the
    manifest itself when the run had it in hand (a build just published it, or planning read it), so the report
    does not read it again.
    """

    target: str
    status: Status
    reason: str = ""
    manifest: str | None = None
    build_s: float | None = None
    plan_bytes: int | None = None
    verification: dict = field(default_factory=dict)
    release: str = ""
    manifest_key: str | None = None
    published: Manifest | None = None
    build_digest: str | None = None  # the build this outcome is of (None: not known, e.g. the precision gate refused)

    def to_json(self) -> dict:
        """``{target, status, reason, manifest, build_s, plan_bytes, verification, release}``."""
        return {"target": self.target, "status": self.status, "reason": self.reason, "manifest": self.manifest,
                "build_s": self.build_s, "plan_bytes": self.plan_bytes, "verification": self.verification,
                "release": self.release}

    def to_record(self) -> dict:
        """The stored form: ``to_json``, the manifest's store key and the build digest.

        ``trtfarm status`` ties a failure to the build it was of by the digest.
        """
        return {**self.to_json(), "manifest_key": self.manifest_key, "build_digest": self.build_digest}

    @classmethod
    def from_record(cls, record: dict, store_uri: str) -> TargetOutcome:
        """An outcome read back from a run's ``outcomes.json`` in the store at ``store_uri``.

        Records written before the key was stored name only the manifest's URL: its key is the URL less the store's.
        """
        url, key = record.get("manifest"), record.get("manifest_key")
        if key is None and url and url.startswith(store_uri.rstrip("/") + "/"):
            key = url[len(store_uri.rstrip("/")) + 1:]
        return cls(record["target"], record["status"], record.get("reason") or "", url, record.get("build_s"),
                   record.get("plan_bytes"), record.get("verification") or {}, record.get("release") or "", key,
                   build_digest=record.get("build_digest"))


@dataclass(frozen=True)
class RunRow:
    """One target of one model in a run: what ``trtfarm build`` prints and the farm's report table shows."""

    model: str
    outcome: TargetOutcome

    def to_json(self) -> dict:
        """``{model, target, status, reason, manifest, build_s, plan_bytes, verification, release}``."""
        return {"model": self.model, **self.outcome.to_json()}
