"""OpenSSF model-signing bundles, written and checked with ``cryptography`` alone.

A bundle is a Sigstore bundle (``application/vnd.dev.sigstore.bundle.v0.3+json``) whose DSSE envelope carries an
in-toto statement with model-signing's predicate (``https://model_signing/signature/v1.0``): every signed file by
name with its sha256, and as the subject a root digest over those digests in name order. The envelope is signed
over DSSE's pre-authentication encoding with an ECDSA key; the key is named by its hint, no certificate and no
transparency log (model-signing's key-based, offline mode). ``model_signing verify key`` accepts these bundles.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from trtfarm.errors import MismatchError
from trtfarm.signing.keys import Signer, TrustedKey, TrustedKeys, key_hint

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MODEL_SIGNING_PREDICATE = "https://model_signing/signature/v1.0"
Reason = Literal["unsigned", "untrusted key", "bad signature", "other bytes", "malformed", "other identity",
                 "unsigned release", "rollback", "frozen", "tampered"]


class SignatureRefused(MismatchError):
    """A signature check failed; ``reason`` is the kind, the message one line naming it. Exit 1 (a mismatch).

    The command line says ``refused: <reason>: <detail>``.
    """

    prefix = "refused"

    def __init__(self, reason: Reason, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature is over."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(subjects: Sequence[Mapping], predicate_type: str, predicate: Mapping) -> dict:
    """An in-toto v1 statement."""
    return {"_type": STATEMENT_TYPE, "subject": [dict(s) for s in subjects], "predicateType": predicate_type,
            "predicate": dict(predicate)}


def root_digest(resources: Mapping[str, str]) -> str:
    """model-signing's subject digest: sha256 over the raw digests of the resources, in name order."""
    h = hashlib.sha256()
    for name in sorted(resources):
        h.update(bytes.fromhex(resources[name]))
    return h.hexdigest()


def signing_statement(name: str, resources: Mapping[str, str], ignore_paths: Sequence[str] = ()) -> dict:
    """The model-signing statement over ``resources`` (file name -> sha256) of the folder ``name``."""
    predicate = {"serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False,
                                   "ignore_paths": list(ignore_paths)},
                 "resources": [{"name": n, "algorithm": "sha256", "digest": resources[n]} for n in sorted(resources)]}
    return statement([{"name": name, "digest": {"sha256": root_digest(resources)}}], MODEL_SIGNING_PREDICATE,
                     predicate)


def sign_statement(signer: Signer, doc: Mapping) -> bytes:
    """A Sigstore bundle (JSON bytes) holding ``doc`` in a DSSE envelope signed by ``signer``."""
    payload = json.dumps(doc, indent=2).encode()
    sig = signer.sign(pae(INTOTO_PAYLOAD_TYPE, payload))
    bundle = {"mediaType": BUNDLE_MEDIA_TYPE,
              "verificationMaterial": {"publicKey": {"hint": key_hint(signer.public_key_pem)}, "tlogEntries": []},
              "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": INTOTO_PAYLOAD_TYPE,
                               "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]}}
    return (json.dumps(bundle, indent=2) + "\n").encode()


def sign_resources(signer: Signer, name: str, resources: Mapping[str, str], ignore_paths: Sequence[str] = ()) -> bytes:
    """Sign the files ``resources`` (name -> sha256) as one model-signing bundle."""
    return sign_statement(signer, signing_statement(name, resources, ignore_paths))


@dataclass(frozen=True)
class Verified:
    """A bundle that checked out: the trusted key that signed it and the digests it signs."""

    key: TrustedKey
    resources: dict[str, str]


def _text(value: object, what: str) -> str:
    """``value`` when it is a string; ``malformed`` naming the field otherwise (a bundle is untrusted until checked)."""
    if not isinstance(value, str):
        raise SignatureRefused("malformed", f"the bundle's {what} is a {type(value).__name__}, not a string")
    return value


def _envelope(bundle: bytes) -> tuple[str | None, bytes, bytes]:
    """(key hint, payload, signature) of a bundle; ``malformed`` when it is not one."""
    try:
        doc = json.loads(bundle)
        if not isinstance(doc, dict) or doc.get("mediaType") != BUNDLE_MEDIA_TYPE:
            kind = doc.get("mediaType") if isinstance(doc, dict) else type(doc).__name__
            raise SignatureRefused("malformed", f"not a model-signing bundle (mediaType {kind!r}, expected "
                                   f"{BUNDLE_MEDIA_TYPE})")
        env = doc["dsseEnvelope"]
        if env.get("payloadType") != INTOTO_PAYLOAD_TYPE or len(env.get("signatures") or []) != 1:
            raise SignatureRefused("malformed", "the DSSE envelope must carry one signature over an in-toto payload")
        hint = ((doc.get("verificationMaterial") or {}).get("publicKey") or {}).get("hint") or None
        payload = _text(env["payload"], "dsseEnvelope.payload")
        sig = _text(env["signatures"][0]["sig"], "dsseEnvelope.signatures[0].sig")
        return (None if hint is None else _text(hint, "publicKey.hint"), base64.b64decode(payload, validate=True),
                base64.b64decode(sig, validate=True))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise SignatureRefused("malformed", f"the signature file is not a valid bundle ({type(err).__name__}: "
                               f"{err})") from err


def _signed_resources(payload: bytes) -> dict[str, str]:
    try:
        doc = json.loads(payload)
        if doc["_type"] != STATEMENT_TYPE or doc["predicateType"] != MODEL_SIGNING_PREDICATE:
            raise SignatureRefused("malformed", f"the signed statement is a {doc.get('predicateType')!r}, not a "
                                   "model-signing v1.0 signature")
        resources = {_text(r["name"], "resource name"): _text(r["digest"], "resource digest")
                     for r in doc["predicate"]["resources"] if r["algorithm"] == "sha256"}
        subject = doc["subject"][0]["digest"]["sha256"]
        root = root_digest(resources)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise SignatureRefused("malformed", f"the signed statement is not a model-signing statement "
                               f"({type(err).__name__}: {err})") from err
    if root != subject:
        raise SignatureRefused("malformed", "the signed statement's root digest does not cover its resources")
    return resources


def verify_envelope(bundle: bytes, trust: TrustedKeys) -> tuple[TrustedKey, bytes]:
    """The trusted key that signed ``bundle`` and the payload it signed; ``SignatureRefused`` otherwise."""
    hint, payload, sig = _envelope(bundle)
    candidates = [trust.by_hint(hint)] if hint else list(trust.keys)
    if hint and candidates[0] is None:
        raise SignatureRefused("untrusted key", f"signed by key {hint[:12]}, which is not among the "
                               f"{trust.describe()}")
    signed = pae(INTOTO_PAYLOAD_TYPE, payload)
    key = next((k for k in candidates if k.verifies(sig, signed)), None)
    if key is None:
        who = f"key {hint[:12]}" if hint else "none of the trusted keys"
        raise SignatureRefused("bad signature" if hint else "untrusted key",
                               f"the signature does not verify with {who} (the bundle was altered, or signed by "
                               f"another key); {trust.describe()}")
    return key, payload


def verify_resources(bundle: bytes, trust: TrustedKeys, actual: Mapping[str, str]) -> Verified:
    """Check that a trusted key signed exactly ``actual`` (file name -> sha256 of the bytes at hand)."""
    key, payload = verify_envelope(bundle, trust)
    resources = _signed_resources(payload)
    for name in sorted(set(resources) | set(actual)):
        want, have = resources.get(name), actual.get(name)
        if want is None:
            raise SignatureRefused("other bytes", f"{name} is not covered by the signature")
        if have is None:
            raise SignatureRefused("other bytes", f"the signature covers {name}, which is missing")
        if want != have:
            raise SignatureRefused("other bytes", f"{name} has sha256 {have[:16]}…, the signature by key "
                                   f"{key.hint[:12]} covers {want[:16]}… (replaced after signing)")
    return Verified(key, resources)
