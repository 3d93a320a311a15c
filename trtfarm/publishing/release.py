"""Release pointers: ``releases/<model>/<gpu>/<toolchain>-<version>.json`` names the plan serving hosts pull.

A pointer moves by compare-and-swap, only when the target's verification policy accepts the manifest (default: the
engine was validated on the target GPU; a target may opt into ``built``), and never to an older export unless a
person rolls it back on purpose. Every move is recorded in the pointer's history with who and why.
"""

from __future__ import annotations

import getpass
import json
import socket
from datetime import datetime, timedelta, timezone

from pydantic import ValidationError

from trtfarm.errors import CorruptObject, MismatchError, UserInputError
from trtfarm.layout import (
    PLAN_NAME,
    channel_key,
    folder_of,
    manifest_key,
    parse_channel_key,
    parse_plan_key,
    releases_prefix,
)
from trtfarm.layout import toolchain_label as label_of
from trtfarm.publishing.publish import plan_intact, read_manifest
from trtfarm.publishing.release_check import read_pointer
from trtfarm.signing.accepted import check_not_rolled_back
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.release_claim import DEFAULT_EXPIRY, ReleaseClaim, now_utc, sign_release
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer, SeenPointer

HISTORY = 50


def with_event(history: list[ReleaseEvent], event: ReleaseEvent) -> list[ReleaseEvent]:
    """``history`` with ``event`` appended, trimmed to ``HISTORY`` moves: the oldest refreshes go first.

    A refresh only re-signs the current build, so years of nightly ``trtfarm sign`` never push a release (and with it
    the release's age and Triton version) out of the history; past that, the oldest moves go.
    """
    moves = [*history, event]
    refreshes = [i for i, e in enumerate(moves[:-1]) if e.action == "refresh"]
    dropped = set(refreshes[:max(0, len(moves) - HISTORY)])
    return [e for i, e in enumerate(moves) if i not in dropped][-HISTORY:]


class ReleaseRefused(UserInputError):
    """The pointer may not move to this plan; the message says why and how to override on purpose."""


class ChannelRefused(MismatchError):
    """A channel move the store's state refuses: a promotion another writer made first, no earlier good release."""


def toolchain_label(m: Manifest) -> str:
    """``tensorrt-11.4.0.106`` for a manifest's target."""
    return label_of(m.target.flavour, m.target.toolchain_version)


def pointer_key(m: Manifest, channel: str = "stable") -> str:
    """The pointer of ``channel`` this manifest's plan would be released under."""
    return channel_key(m.model.name, m.target.gpu, toolchain_label(m), channel)


def policy_blocker(m: Manifest, release_on: str) -> str | None:
    """Why the verification policy refuses this manifest, or None when it accepts it."""
    failed = [k for k, c in m.verification if c.status == "failed"]
    if failed:
        return f"verification failed ({', '.join(failed)}): {getattr(m.verification, failed[0]).detail}"
    if release_on == "engine" and m.verification.engine.status != "passed":
        return (f"the engine check is {m.verification.engine.status} on {m.target.gpu_name}; this target releases "
                "only a plan validated on its GPU (set release_on: built in gpu_targets.yaml to release on build)")
    if m.verification.built.status != "passed":
        return f"the build check is {m.verification.built.status}"
    return None


def seen_pointer(store: Store, key: str) -> SeenPointer | None:
    """The pointer at ``key`` as planning reads it, to carry to the release; None when it is damaged.

    A damaged pointer is not carried: the release step repairs it (and says so).
    """
    try:
        pointer, etag = read_pointer(store, key)
    except CorruptObject:
        return None
    return SeenPointer(key=key, pointer=pointer, etag=etag)


def _salvaged(data: bytes) -> tuple[list[ReleaseEvent], int]:
    """The events of a damaged pointer that still parse, and its version (none, 0 when it is not JSON at all)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return [], 0
    doc = doc if isinstance(doc, dict) else {}
    events, version = doc.get("history"), doc.get("version")
    good = []
    for event in events if isinstance(events, list) else []:
        try:
            good.append(ReleaseEvent.model_validate(event))
        except ValidationError:
            continue
    return good, version if type(version) is int and version > 0 else 0


def _newest_releasable(store: Store, key: str, release_on: str) -> str | None:
    """The key of the newest manifest of the pointer's identity, in its own folder, that the policy accepts."""
    from trtfarm.publishing.catalog import manifests_in
    from trtfarm.publishing.release_check import manifest_identity_problem

    parsed = parse_channel_key(key)
    if parsed is None:
        return None
    name, channel = parsed
    found = [x for x in manifests_in(store, name.model, problems=[]) if pointer_key(x.manifest, channel) == key
             and policy_blocker(x.manifest, release_on) is None and not manifest_identity_problem(x.key, x.manifest)]
    newest = max(found, key=lambda x: (x.manifest.model.exported_at or "", x.manifest.created_at), default=None)
    return newest.key if newest else None


def repair_pointer(store: Store, key: str, release_on: str = "engine", signer=None) -> str | None:
    """Rewrite a damaged pointer trtfarm owns; None when it is intact (or absent), else what was done.

    Unsigned, from its history when its last parseable move names a manifest still in the store; else from the
    newest manifest of its (model, GPU, toolchain) that the policy accepts; else it is removed (nothing to point
    at). With ``signer`` the repair is a signed release (the next version after the one the damaged bytes still
    say), and it names only what the signer can vouch for: the newest such manifest, never one read from damaged
    bytes (a bucket writer could otherwise have a worker sign a rollback).
    """
    from trtfarm.publishing.attest import read_stored

    try:
        read_pointer(store, key)
        return None
    except CorruptObject as damaged:
        why = str(damaged).split(": ", 1)[-1].split("; rerun", 1)[0]
        blob = store.get(key)
    history, version = _salvaged(blob.data)
    last = None if signer else next((e for e in reversed(history) if read_manifest(store, e.manifest)), None)
    manifest = last.manifest if last else _newest_releasable(store, key, release_on)
    stored = read_stored(store, manifest) if manifest else None
    if stored is None:
        store.delete(key)
        return f"removed the damaged pointer {key} ({why}): no manifest in the store to point it at"
    m = stored.manifest
    event = ReleaseEvent(action="release", manifest=manifest, onnx_digest=m.model.onnx_digest,
                         exported_at=m.model.exported_at, by=f"trtfarm repair ({who()})", reason=f"repaired: {why}",
                         at=event_time())
    channel = parse_channel_key(key)[1]  # type: ignore[index]  # read_pointer found a pointer key's object
    pointer = ReleasePointer(channel=channel, model=m.model.name, gpu=m.target.gpu, toolchain=toolchain_label(m),
                             manifest=manifest,
                             plan_key=m.plan.key, plan_sha256=m.plan.sha256, onnx_digest=m.model.onnx_digest,
                             build_digest=m.build.build_digest, exported_at=m.model.exported_at,
                             history=with_event(history, event.model_copy(update={"seq": version + 1})),
                             version=version + 1)
    pointer, _ = sign_pointer(pointer, m, stored.manifest_sha256, signer, DEFAULT_EXPIRY)
    try:
        store.compare_and_swap(key, pointer.to_json(), blob.etag)
    except Conflict:
        return None  # someone rewrote it meanwhile: theirs stands
    source = "its history" if last else "the newest manifest"
    signed = f", signed as version {pointer.version}" if pointer.claim else ""
    return f"repaired the damaged pointer {key} ({why}): rewritten from {source} to {manifest}{signed}"


def stored_manifest_key(store: Store, m: Manifest, source: str) -> str:
    """The store key of ``m`` (see ``_stored_key``); a manifest read from a store key must be the one at that key.

    A manifest of another identity copied to a key is refused (``SignatureRefused``), not released where it came from.
    """
    from trtfarm.publishing.release_check import manifest_identity_problem

    asked = source.removeprefix(store.uri + "/") if source.startswith(store.uri + "/") else None
    problem = manifest_identity_problem(asked, m) if asked else None
    if problem:
        raise SignatureRefused("other identity", f"not released: {problem}")
    return _stored_key(store, m, source)


def _stored_key(store: Store, m: Manifest, source: str) -> str:
    """The key under which ``store`` holds the manifest ``m`` (read from ``source``: a key, URL or a local copy).

    A release names a manifest in the store, never a local copy: ``ReleaseRefused`` unless the store holds this
    manifest at its plan's folder, describing the same build, with its plan object in place.
    """
    folder = parse_plan_key(m.plan.key)
    if folder is None or folder.leaf != PLAN_NAME:
        raise ReleaseRefused(f"not released: {source} names the plan {m.plan.key!r}, which is not a plan key of a "
                             "trtfarm store; release a manifest that `trtfarm plans` lists")
    key = manifest_key(folder_of(m.plan.key))
    stored = read_manifest(store, key)
    if stored is None:
        raise ReleaseRefused(f"not released: {source} describes {store.url(key)}, which is not in the store "
                             f"{store.uri}; publish the plan there first, or pass --store with the store it came from")
    if not stored.same_build(m) or stored.plan.sha256 != m.plan.sha256:
        raise ReleaseRefused(f"not released: {source} does not match the store's {store.url(key)} (build "
                             f"{m.build.build_digest[:12]} vs {stored.build.build_digest[:12]}, plan sha256 "
                             f"{m.plan.sha256[:12]} vs {stored.plan.sha256[:12]}); release the store's manifest")
    damaged = plan_intact(store, stored)
    if damaged:
        raise CorruptObject(f"not released: {store.url(key)}: {damaged}; rebuild it (`trtfarm build`)")
    return key


def event_time() -> str:
    """Now, as an event records it (UTC, milliseconds): for people; the ledger's order is its sequence numbers."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def who() -> str:
    """``user@host``: who moves a pointer (or records a state), as histories name them."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _older(m: Manifest, current: ReleasePointer) -> bool:
    """True when ``m``'s export took its place before the one ``current`` serves; one export's plans never did."""
    # a place: when the bytes were first registered or built (``registry.export_place``), never a file's time
    mine, theirs = m.model.exported_at, current.exported_at
    if not (mine and theirs) or m.model.onnx_digest == current.onnx_digest:
        return False
    try:
        return datetime.fromisoformat(mine) < datetime.fromisoformat(theirs)
    except (TypeError, ValueError):  # a time that does not parse, or has no zone: compared as written
        return mine < theirs


def check_current(store: Store, key: str, current: ReleasePointer | None, trust, accepted) -> None:
    """Refuse to move a pointer that names another identity or carries a bad or older claim (``--force`` skips)."""
    if current is None:
        return
    from trtfarm.publishing.attest import read_stored
    from trtfarm.publishing.release_check import asked_identity, check_claim, check_identity

    stored = read_stored(store, current.manifest, attestations=trust is not None and current.claim is not None)
    try:
        if stored is None:  # what it named is gone (deleted by hand): nothing to protect, only the key to match
            if current.identity != asked_identity(key):
                raise SignatureRefused("other identity", f"{store.url(key)} asks for {asked_identity(key)}, but the "
                                       f"pointer there names {current.identity}")
            return
        check_identity(store, key, current, stored)
        if trust is not None and current.claim is not None:
            _, claim = check_claim(store, key, current, stored, trust)
            check_not_rolled_back(claim, accepted.get(store.uri, claim.track) if accepted else None)
    except SignatureRefused as err:
        raise SignatureRefused(err.reason, f"not released: {err.detail}; `--force` replaces it") from err


def sign_pointer(pointer: ReleasePointer, m: Manifest, manifest_sha256: str, signer,
            expiry: timedelta) -> tuple[ReleasePointer, ReleaseClaim | None]:
    """``pointer`` with its release claim signed by ``signer``, and the claim (unchanged and None without one)."""
    if signer is None:
        return pointer, None
    ev, issued = pointer.current, now_utc()
    # a refresh of an operator's rollback still says rollback: a host that accepted the newer export takes it
    action = "rollback" if ev.action == "refresh" and pointer.released.action == "rollback" else ev.action
    claim = ReleaseClaim(model=pointer.model, gpu=pointer.gpu, toolchain=pointer.toolchain, manifest=pointer.manifest,
                         manifest_sha256=manifest_sha256, plan_sha256=m.plan.sha256, exported_at=m.model.exported_at,
                         version=pointer.version, action="release" if action == "promote" else action, by=ev.by,
                         reason=ev.reason, issued_at=issued.isoformat(), expires_at=(issued + expiry).isoformat(),
                         channel=pointer.channel)
    return pointer.model_copy(update={"claim": sign_release(signer, claim)}), claim


def next_version(store: Store, current: ReleasePointer | None, accepted) -> int:
    """The version the next move gives the pointer: past the current one's and past what this host accepted."""
    seen = accepted.get(store.uri, current.track) if accepted is not None and current else None
    return max(current.version if current else 0, seen.version if seen else 0) + 1


def refresh_release(store: Store, key: str, signer, *, reason: str, by: str | None = None,
                    expiry: timedelta = DEFAULT_EXPIRY, max_attempts: int = 20) -> ReleasePointer | None:
    """Sign the current release at ``key`` again (next version, new expiry; the same manifest); None if absent.

    ``trtfarm sign`` runs it for pointers with no claim or one near its expiry; the pointer must name one identity
    (``SignatureRefused`` otherwise: a tampered pointer is never signed).
    """
    from trtfarm.publishing.attest import read_stored
    from trtfarm.publishing.release_check import check_identity

    for _ in range(max_attempts):
        current, etag = read_pointer(store, key)
        if current is None:
            return None
        stored = read_stored(store, current.manifest)
        m = check_identity(store, key, current, stored)
        event = ReleaseEvent(action="refresh", manifest=current.manifest, onnx_digest=m.model.onnx_digest,
                             exported_at=m.model.exported_at, by=by or who(), reason=reason,
                             at=event_time())
        event = event.model_copy(update={"seq": current.version + 1})
        pointer = current.model_copy(update={"history": with_event(current.history, event),
                                             "version": current.version + 1})
        pointer, _ = sign_pointer(pointer, m, stored.manifest_sha256, signer, expiry)
        try:
            store.compare_and_swap(key, pointer.to_json(), etag)
            return pointer
        except Conflict:
            continue
    raise ReleaseRefused(f"{key}: {max_attempts} concurrent writers in a row; try again")


def list_pointers(store: Store, model: str | None = None, problems: list[str] | None = None) -> list[ReleasePointer]:
    """Every release pointer (of one model); with ``problems``, damaged ones are skipped and described there."""
    from trtfarm.publishing.release_check import asked_identity

    out = []
    for key in store.list(releases_prefix(model)):
        try:
            pointer, _ = read_pointer(store, key)
            if pointer and pointer.identity != asked_identity(key):
                raise SignatureRefused("other identity", f"{store.url(key)} asks for {asked_identity(key)}, but the "
                                       f"pointer there names {pointer.identity}: it was copied from another release")
        except (CorruptObject, SignatureRefused) as damaged:
            if problems is None:
                raise
            problems.append(str(damaged))
            continue
        if pointer:
            out.append(pointer)
    return out
