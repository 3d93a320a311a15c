"""The one decision every consumer of a plan makes: is this plan folder signed by a key the fleet trusts?

``verify``, ``pull``, ``triton``, ``release`` and ``load_plan`` all call ``check_signature`` with the digests of the
bytes they hold. Without trusted keys the answer is *unsigned-checked* (never a silent ok), except for a
version-compatible plan: it carries host code that runs when it is deserialised, so it needs a trusted signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trtfarm.signing.bundle import SignatureRefused, verify_resources
from trtfarm.signing.keys import TrustedKey, TrustedKeys

SIGN_FIX = "`trtfarm sign` (with TRTFARM_SIGNING_KEY set to a worker key) signs what is published unsigned"
HOW_TO_TRUST = ("set TRTFARM_TRUSTED_KEYS=PATH[,PATH...] (PEM public keys) or signing.trusted_keys in "
                "gpu_targets.yaml")


@dataclass(frozen=True)
class TrustVerdict:
    """``ok``: True (signed by a trusted key), None (unsigned-checked: no trust configured), False (refused)."""

    ok: bool | None
    detail: str
    reason: str | None = None  # the refusal's kind: unsigned, untrusted key, bad signature, other bytes, malformed
    key: TrustedKey | None = None

    @property
    def status(self) -> str:
        """``signed``, ``unsigned-checked`` or ``refused``, for JSON and tables."""
        return "signed" if self.ok else "unsigned-checked" if self.ok is None else "refused"

    def raise_if_refused(self, where: str) -> None:
        """Raise ``SignatureRefused`` (one line: where, reason, detail) unless the verdict allows the plan."""
        if self.ok is False:
            raise SignatureRefused(self.reason or "unsigned", f"{where}: {self.detail}")


def check_signature(trust: TrustedKeys | None, signature: bytes | None, actual: Mapping[str, str], *,
                    host_code: bool = False) -> TrustVerdict:
    """Judge one plan folder: ``signature`` (a bundle, or None) against the digests of the bytes at hand."""
    if trust is None:
        if host_code:
            return TrustVerdict(False, "a version-compatible plan carries host code that runs at load, so it is "
                                "refused unless signed by a trusted key, and no trusted keys are configured: "
                                f"{HOW_TO_TRUST}", "unsigned")
        present = "it carries a signature, not checked" if signature else "it is not signed"
        return TrustVerdict(None, f"unsigned-checked: no trusted keys are configured, so nothing proves who built "
                                  f"this plan ({present}); {HOW_TO_TRUST}")
    if signature is None:
        return TrustVerdict(False, f"unsigned: no signature for this manifest, and verification is on "
                                   f"({trust.describe()}); {SIGN_FIX}", "unsigned")
    try:
        verified = verify_resources(signature, trust, actual)
    except SignatureRefused as err:
        return TrustVerdict(False, str(err), err.reason)
    return TrustVerdict(True, f"signed by trusted key {verified.key.label}, over the plan, manifest and provenance",
                        key=verified.key)
