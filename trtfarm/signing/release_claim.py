"""Signed releases: which manifest serves (model, GPU, toolchain), at which version, until when, and who said so.

A release claim is an in-toto statement (predicate ``urn:trtfarm:release:v1``) in a DSSE envelope, the same
Sigstore bundle the plan signatures use, so the same trusted keys check it. Its subject is the manifest's bytes (by
sha256); the manifest's own signature then covers the plan and provenance. The claim carries the identity it
releases, a version that only grows (each move of the pointer takes the last version plus one, under the pointer's
compare-and-swap), the action (a release, an operator's rollback, a forced move, a refresh of the expiry), who and
why, when it was issued and when it expires. It travels inside the release pointer (``ReleasePointer.claim``).

docs/signing.md maps each of The Update Framework's attacks to the check that answers it here.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtfarm.signing.bundle import SignatureRefused, sign_statement, statement, verify_envelope
from trtfarm.signing.keys import Signer, TrustedKey, TrustedKeys

RELEASE_PREDICATE = "urn:trtfarm:release:v1"
DEFAULT_EXPIRY = timedelta(days=30)
Action = Literal["release", "rollback", "forced", "refresh"]


class ReleaseClaim(BaseModel):
    """What one signed release says; every field is checked by type (a claim is untrusted JSON until verified)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    model: str
    gpu: str
    toolchain: str
    manifest: str = Field(description="the manifest's store key")
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    plan_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    exported_at: str | None = None
    version: int = Field(ge=1)
    action: Action
    by: str
    reason: str
    issued_at: str
    expires_at: str
    channel: Literal["stable", "candidate"] = "stable"

    @property
    def identity(self) -> str:
        """``model/gpu/toolchain``, as messages name a release."""
        return f"{self.model}/{self.gpu}/{self.toolchain}"

    @property
    def track(self) -> str:
        """The identity and, for the candidate channel, ``#candidate``: a host remembers each channel apart."""
        return self.identity + ("" if self.channel == "stable" else f"#{self.channel}")

    def issued(self) -> datetime:
        """``issued_at`` as an aware datetime."""
        return _when(self.issued_at, "issued_at")

    def expires(self) -> datetime:
        """``expires_at`` as an aware datetime."""
        return _when(self.expires_at, "expires_at")


def _when(text: str, what: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError as err:
        raise SignatureRefused("malformed", f"the release claim's {what} {text[:40]!r} is not an ISO time") from err
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def now_utc() -> datetime:
    """The current time, aware, to the second (what claims record)."""
    return datetime.now(timezone.utc).replace(microsecond=0)


def release_statement(claim: ReleaseClaim) -> dict:
    """The in-toto statement of ``claim``: the manifest (by key and sha256) as its subject."""
    doc = claim.model_dump()
    if claim.channel == "stable":  # a stable claim reads as it did before channels: older verifiers accept it
        doc.pop("channel")
    return statement([{"name": claim.manifest, "digest": {"sha256": claim.manifest_sha256}}], RELEASE_PREDICATE, doc)


def sign_release(signer: Signer, claim: ReleaseClaim) -> dict:
    """The bundle (as a JSON object, for the pointer) of ``claim`` signed by ``signer``."""
    return json.loads(sign_statement(signer, release_statement(claim)))


def verify_release(bundle: object, trust: TrustedKeys) -> tuple[TrustedKey, ReleaseClaim]:
    """The trusted key that signed the release bundle and its claim; ``SignatureRefused`` otherwise."""
    if not isinstance(bundle, dict):
        raise SignatureRefused("malformed", f"the release claim is a {type(bundle).__name__}, not a bundle")
    key, payload = verify_envelope(json.dumps(bundle).encode(), trust)
    try:
        doc = json.loads(payload)
        if doc.get("predicateType") != RELEASE_PREDICATE:
            raise SignatureRefused("malformed", f"the signed statement is a {doc.get('predicateType')!r}, not a "
                                   "trtfarm release")
        claim = ReleaseClaim.model_validate(doc["predicate"])
        subject = doc["subject"][0]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise SignatureRefused("malformed", f"the signed release is not a release claim ("
                               f"{_problem(err)})") from err
    if subject != {"name": claim.manifest, "digest": {"sha256": claim.manifest_sha256}}:
        raise SignatureRefused("malformed", "the signed release's subject is not the manifest its claim names")
    claim.issued(), claim.expires()
    return key, claim


def _problem(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'claim'}: {first['msg']}"
    return f"{type(err).__name__}: {err}"


def unverified_claim(bundle: object) -> ReleaseClaim | None:
    """The claim inside a release bundle, read without checking who signed it (to decide on a refresh only)."""
    try:
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))  # type: ignore[index]
        claim = ReleaseClaim.model_validate(payload["predicate"])
        claim.expires()
    except (ValueError, KeyError, TypeError, SignatureRefused):
        return None
    return claim
