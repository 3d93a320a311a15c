"""Signed state records: what TUF calls targets metadata, one signature per model instead of one bundle per release.

A state record (``state/record.py``) lists each target's release with what the writer verified: the keys
that signed its release claim and its plan, and when the claim expires. Signed by the run's key, a host that trusts
that key verifies one signature per model and takes the record's word for each release whose keys it trusts too;
anything else it checks from the store's objects itself. The statement's subject is the record's canonical JSON
(``urn:trtfarm:state:v1``); the bundle is the same Sigstore bundle plans and releases carry.
"""

from __future__ import annotations

import hashlib
import json

from trtfarm.signing.bundle import SignatureRefused, sign_statement, statement, verify_envelope
from trtfarm.signing.keys import Signer, TrustedKey, TrustedKeys

STATE_PREDICATE = "urn:trtfarm:state:v1"


def canonical(doc: dict) -> bytes:
    """The bytes a state record's signature covers: its JSON, keys sorted, without the signature itself."""
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_state(signer: Signer, name: str, doc: dict) -> dict:
    """The bundle (a JSON object) that signs the state record ``doc`` stored as ``name``."""
    subject = {"name": name, "digest": {"sha256": hashlib.sha256(canonical(doc)).hexdigest()}}
    return json.loads(sign_statement(signer, statement([subject], STATE_PREDICATE, {"model": doc.get("model")})))


def verify_state(bundle: object, name: str, doc: dict, trust: TrustedKeys) -> TrustedKey:
    """The trusted key that signed the record ``doc`` stored as ``name``; ``SignatureRefused`` otherwise."""
    if not isinstance(bundle, dict):
        raise SignatureRefused("unsigned", f"{name}: the state record is not signed")
    key, payload = verify_envelope(json.dumps(bundle).encode(), trust)
    try:
        signed = json.loads(payload)
        subject = signed["subject"][0]
        ok = signed.get("predicateType") == STATE_PREDICATE and subject == {
            "name": name, "digest": {"sha256": hashlib.sha256(canonical(doc)).hexdigest()}}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise SignatureRefused("malformed", f"{name}: the signed statement is not a state record's") from err
    if not ok:
        raise SignatureRefused("other bytes", f"{name}: the signature is of another record (or another key)")
    return key
