"""The webhook receiver's decisions: which requests are genuine, which exports they name, and which are new.

Two ways in, both ending in one ``trtfarm.model.exported`` event per export:

- **SNS** (S3 event notifications through an SNS HTTP(S) subscription): the topic must be on the allow-list, the
  message signature is checked against the SNS signing certificate (``SignatureVersion`` 1: SHA1, 2: SHA256), a
  ``SubscriptionConfirmation`` is confirmed by fetching its ``SubscribeURL``, and each ``ObjectCreated`` record whose
  key ends in the trigger file (``model.onnx``) names the export folder around it.
- **Generic JSON** ``{"model_uri": ..., "refit": false}``: ``X-Trtfarm-Timestamp`` (unix seconds) and
  ``X-Trtfarm-Signature: sha256=<hex>``, the HMAC-SHA256 of ``"<timestamp>." + body`` with the shared secret,
  within a replay window.
  ``"refit": true`` (a fine-tune: same graph, new weights) sends ``trtfarm.model.weights-updated`` instead, which the
  ``refit`` deployment takes.

Delivery is at least once and a multipart upload emits two S3 events, so each export is claimed once in the store
(``webhook/exports/<sha256>.json``, create-only) before its event is sent; a duplicate finds the claim and stops.
Every export must lie under one of the configured roots (``--allow-root``, default: the store), checked on the
decoded path before anything is opened; ``.`` and ``..`` segments (``%2e%2e`` too) are refused.
Nothing here talks HTTP or Prefect: ``trtfarm.triggers.receiver`` serves it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, unquote_plus, urlparse

from trtfarm.errors import StoreError
from trtfarm.layout import is_name
from trtfarm.layout_shared import webhook_claim_key
from trtfarm.publishing.registry import EXPORT_NAME, ONNX_NAME, export_folder, export_name, is_registry_export
from trtfarm.store import Store, is_store_uri, is_uri, uri_parts
from trtfarm.store.uri import SCHEMES

EVENT_NAME = "trtfarm.model.exported"
REFIT_EVENT = "trtfarm.model.weights-updated"  # same graph, new weights: the refit deployment takes these
MAX_COMPONENT, MAX_PATH = 255, 1024  # a filesystem's NAME_MAX; S3's longest key
SNS_CERT_HOST = re.compile(r"^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$")
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SIGNED_KEYS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}


class Rejected(Exception):
    """A request that triggers nothing: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Export:
    """One export a request names: its folder URI and the identity that makes it unique (URI + object version)."""

    uri: str
    name: str
    version: str
    refit: bool = False

    @property
    def claim_id(self) -> str:
        """Stable across duplicate deliveries of the same upload."""
        return hashlib.sha256(f"{self.uri}#{self.version}".encode()).hexdigest()

    def event(self, source: str) -> dict:
        """The Prefect event (``POST /api/events`` body item); its id is derived from the claim."""
        return {"id": str(uuid.UUID(self.claim_id[:32])), "occurred": datetime.now(timezone.utc).isoformat(),
                "event": REFIT_EVENT if self.refit else EVENT_NAME,
                "resource": {"prefect.resource.id": f"trtfarm.model.{self.name}", "prefect.resource.name": self.name},
                "payload": {"model_uri": self.uri, "version": self.version, "source": source}}


# --- where exports may come from ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Root:
    """A place exports may come from: ``scheme``, ``bucket`` (S3; "" for files) and path ``parts`` (decoded)."""

    scheme: str
    bucket: str
    parts: tuple[str, ...]

    def holds(self, other: Root) -> bool:
        """True when ``other`` is this root or lies under it."""
        return (self.scheme, self.bucket) == (other.scheme, other.bucket) and \
            other.parts[:len(self.parts)] == self.parts

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/" + "/".join(self.parts)


def location(uri: str, what: str = "model_uri") -> Root:
    """Parse an ``s3://`` or ``file://`` URI the way the store opens it (percent-decoded); ``Rejected(400)`` if bad.

    File paths are resolved (symlinks followed) without touching anything that is not there.
    """
    scheme, host, raw = uri_parts(uri)
    path = unquote(raw)  # what open_store does: %2e%2e becomes .. here, so check after decoding
    parts = tuple(p for p in path.split("/") if p)
    if scheme not in SCHEMES:
        raise Rejected(400, f"{what} {uri!r}: use s3://bucket/path or file:///path")
    if any(p in (".", "..") for p in parts) or "\0" in path:
        raise Rejected(400, f"{what} {uri!r}: '.' and '..' segments (%2e%2e too) are not allowed; give the folder's "
                            "own path")
    if any(len(p.encode()) > MAX_COMPONENT for p in parts) or len(path.encode()) > MAX_PATH:
        raise Rejected(400, f"{what} {uri[:80]!r}...: a path component is longer than {MAX_COMPONENT} bytes or the "
                            f"path longer than {MAX_PATH}; no store holds such a name")
    if scheme == "s3":
        if not S3_BUCKET.fullmatch(host):
            raise Rejected(400, f"{what} {uri!r}: {host!r} is not an S3 bucket name")
        return Root("s3", host, parts)
    if host not in ("", "localhost"):
        raise Rejected(400, f"{what} {uri!r}: a file:// URI names this host's files (file:///path), not "
                            f"{host}'s")
    return Root("file", "", Path("/", *parts).resolve().parts[1:])


def root_from_config(uri: str) -> Root:
    """A configured root (``--allow-root``): a URI, or a local path (resolved against the working directory)."""
    if not is_uri(uri):
        uri = Path(uri).resolve().as_uri()
    return location(uri, "--allow-root")


def check_allowed(uri: str, roots: Sequence[Root]) -> None:
    """``Rejected(403)`` unless ``uri`` lies under one of ``roots``; ``Rejected(400)`` if it is malformed."""
    where = location(uri)
    if not any(root.holds(where) for root in roots):
        raise Rejected(403, f"{uri} is outside the folders this receiver accepts ({', '.join(map(str, roots))}); "
                            "start it with --allow-root for that location")


def _read_version(uri: str, folder_etag) -> str | None:
    try:
        return folder_etag(uri)
    except StoreError as err:
        cause = err.__cause__
        status = (getattr(cause, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if 400 <= status < 500:  # the store answered: this URI is not readable (access denied and the like)
            raise Rejected(400, f"cannot read {uri}/{ONNX_NAME} (HTTP {status}): check the URI and that the receiver "
                                "may read it") from err
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise Rejected(502, f"the store holding {uri} did not answer: {first}") from err


# --- generic JSON, HMAC-signed ---------------------------------------------------------------------------------


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of ``"<timestamp>." + body`` (what senders put in ``X-Trtfarm-Signature``)."""
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def check_signature(secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float,
                    window_s: int) -> None:
    """Raise ``Rejected(401)`` unless the request is signed with ``secret`` and recent."""
    if not timestamp or not signature:
        raise Rejected(401, "missing X-Trtfarm-Timestamp or X-Trtfarm-Signature")
    try:
        ts = int(timestamp)
    except ValueError:
        raise Rejected(401, f"X-Trtfarm-Timestamp {timestamp[:32]!r} is not unix seconds") from None
    if abs(now - ts) > window_s:  # both ways: a post dated in the future is a replay waiting to happen
        raise Rejected(401, f"timestamp {ts} is outside the {window_s} s replay window (replayed or clock skew)")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature):
        raise Rejected(401, "signature does not match (wrong secret, or the body was changed)")


def export_from_json(body: bytes, folder_etag, roots: Sequence[Root]) -> Export:
    """The export a generic post names, if it lies under ``roots``.

    ``folder_etag(uri)`` returns the model's ETag (None: not there); it is called only for an allowed URI.
    """
    doc = _json(body)
    uri = doc.get("model_uri") if isinstance(doc, dict) else None
    if not isinstance(uri, str) or not is_store_uri(uri) or not uri_parts(uri)[2].strip("/"):
        raise Rejected(400, 'body must be {"model_uri": "s3://bucket/path/to/export/"} (an export folder URI)')
    uri = canonical_uri(export_folder(uri))
    check_allowed(uri, roots)
    version = _read_version(uri, folder_etag)
    if version is None:
        raise Rejected(400, f"{uri}/{ONNX_NAME} does not exist")
    return Export(uri, _name(uri, doc.get("name")), version.strip('"'), doc.get("refit") is True)


# --- SNS ---------------------------------------------------------------------------------------------------------


def sns_string_to_sign(msg: dict) -> bytes:
    """The canonical string SNS signs: each signed key present, in order, then its value, each on its own line."""
    keys = _SIGNED_KEYS.get(msg.get("Type", ""))
    if keys is None:
        raise Rejected(400, f"unknown SNS message Type {msg.get('Type')!r}")
    return "".join(f"{k}\n{msg[k]}\n" for k in keys if k in msg).encode()


def check_sns_signature(msg: dict, fetch_cert) -> None:
    """Raise ``Rejected(401)`` unless ``msg`` carries a valid SNS signature; ``fetch_cert(url)`` returns PEM bytes."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    url = urlparse(msg.get("SigningCertURL", ""))
    if url.scheme != "https" or not SNS_CERT_HOST.fullmatch(url.hostname or "") or not url.path.endswith(".pem"):
        raise Rejected(401, f"SigningCertURL {msg.get('SigningCertURL')!r} is not an SNS certificate URL")
    algorithm = {"1": hashes.SHA1(), "2": hashes.SHA256()}.get(str(msg.get("SignatureVersion")))
    if algorithm is None:
        raise Rejected(401, f"unsupported SignatureVersion {msg.get('SignatureVersion')!r}")
    try:
        cert = x509.load_pem_x509_certificate(fetch_cert(msg["SigningCertURL"]))
        cert.public_key().verify(base64.b64decode(msg.get("Signature", "")), sns_string_to_sign(msg),
                                 padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        raise Rejected(401, "SNS signature does not verify") from None
    except (ValueError, OSError) as err:
        raise Rejected(401, f"SNS signature could not be checked: {err}") from err


def parse_sns(body: bytes, topics: set[str]) -> dict:
    """The SNS message, if well-formed and from an allowed topic (400 / 403 otherwise)."""
    msg = _json(body)
    if not isinstance(msg, dict) or "Type" not in msg or "TopicArn" not in msg:
        raise Rejected(400, "not an SNS message (needs Type and TopicArn)")
    if msg["TopicArn"] not in topics:
        raise Rejected(403, f"topic {msg['TopicArn']} is not on the allow-list (--topic)")
    return msg


def exports_from_s3_event(message: str, roots: Sequence[Root]) -> list[Export]:
    """Each ``ObjectCreated`` record that completes an export -> its folder (``s3:TestEvent`` -> none).

    Every folder must lie under ``roots`` (``Rejected(403)`` otherwise). A registry export
    (``models/<name>/<export_id>/``) is complete when its ``export.json`` lands (written last by
    ``trtfarm models push``); any other folder when its ``model.onnx`` lands (upload it last, after farm.yaml and
    the data files).
    """
    doc = _json(message.encode())
    if not isinstance(doc, dict):
        raise Rejected(400, "SNS Message is not an S3 event notification")
    if doc.get("Event") == "s3:TestEvent":
        return []
    exports = []
    for record in doc.get("Records", []):
        if not str(record.get("eventName", "")).startswith("ObjectCreated:"):
            continue
        try:
            bucket, obj = record["s3"]["bucket"]["name"], record["s3"]["object"]
            key = unquote_plus(obj["key"])  # S3 event keys are URL-encoded, '+' for spaces
        except (KeyError, TypeError) as err:
            raise Rejected(400, f"S3 record without s3.bucket.name / s3.object.key ({err})") from err
        folder, _, leaf = f"s3://{bucket}/{key}".rpartition("/")
        registry = is_registry_export(folder)
        if not ((leaf == EXPORT_NAME and registry) or (leaf == ONNX_NAME and not registry)):
            continue
        uri = canonical_uri(folder)
        check_allowed(uri, roots)
        exports.append(Export(uri, _name(uri, None), str(obj.get("eTag") or obj.get("sequencer") or "").strip('"')))
    return exports


# --- claims: exactly one event per export ------------------------------------------------------------------------


def claim(store: Store, export: Export, source: str) -> bool:
    """Create-only marker for this export; False when an earlier delivery already claimed it."""
    record = {"uri": export.uri, "name": export.name, "version": export.version, "source": source,
              "claimed_at": datetime.now(timezone.utc).isoformat()}
    return store.put_if_absent(webhook_claim_key(export.claim_id), json.dumps(record).encode())


def release_claim(store: Store, export: Export) -> None:
    """Undo a claim whose event could not be sent, so the sender's retry can go through."""
    store.delete(webhook_claim_key(export.claim_id))


def _json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise Rejected(400, f"malformed JSON: {err}") from err
    except RecursionError as err:
        raise Rejected(400, "malformed JSON: nested too deeply; send a flat object") from err


def canonical_uri(uri: str) -> str:
    """One spelling per export, so its claim is one claim.

    ``file://localhost/a//b``, ``file:///a/%62`` and ``file:///a/b/`` are all ``file:///a/b``: percent-decoded
    (as the store opens it), empty segments dropped, file paths resolved.
    """
    return str(location(uri))


def _name(uri: str, given) -> str:
    if is_name(given):
        return given
    return export_name(uri)
