"""What happened to one target in a run: built, up to date, skipped or failed, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["built", "up-to-date", "skipped", "failed"]


@dataclass
class TargetOutcome:
    """What happened to one target in a run (the ``--json`` contract of ``trtfarm build``).

    ``manifest_key`` is the store key; ``manifest`` its URL, for people and the ``--json`` rows.
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

    def to_json(self) -> dict:
        """``{target, status, reason, manifest, build_s, plan_bytes, verification, release}``."""
        return {"target": self.target, "status": self.status, "reason": self.reason, "manifest": self.manifest,
                "build_s": self.build_s, "plan_bytes": self.plan_bytes, "verification": self.verification,
                "release": self.release}
