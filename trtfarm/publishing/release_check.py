"""The chain from a release pointer to a plan, checked the same way by ``pull``, ``triton``, ``release`` and ``gc``.

A signature proves bytes, not purpose. So besides the plan folder's signature (``attest.StoredPlan.verdict``):
- the pointer's key, its own fields, the manifest it names, and that manifest's key all name one (model, GPU,
  toolchain), and the pointer's plan sha256 is the manifest's (``check_identity``);
- with trusted keys, the pointer carries a release claim signed by one of them, naming that identity and the exact
  manifest bytes (``check_claim``), no older than what this host accepted before and not expired or frozen
  (``accepted.check_fresh``).
Each refusal is a ``SignatureRefused`` (exit 1) naming what was asked for and what was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from trtfarm.errors import CorruptObject
from trtfarm.layout import folder_of, parse_channel_key, parse_plan_key, toolchain_label
from trtfarm.publishing.attest import StoredPlan
from trtfarm.signing.accepted import AcceptedReleases, check_not_frozen, check_not_rolled_back
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.keys import TrustedKey, TrustedKeys
from trtfarm.signing.release_claim import ReleaseClaim, now_utc, verify_release
from trtfarm.signing.verdict import HOW_TO_TRUST, SIGN_FIX
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.pointer import PointerInvalid, ReleasePointer, pointer_from_json


def identity_of(m: Manifest) -> str:
    """``model/gpu/toolchain`` of a manifest."""
    return f"{m.model.name}/{m.target.gpu}/{toolchain_label(m.target.flavour, m.target.toolchain_version)}"


def asked_identity(pointer_key: str) -> str:
    """``model/gpu/toolchain`` a channel's pointer key asks for (the key itself when it is not a pointer key)."""
    parsed = parse_channel_key(pointer_key)
    return "/".join(parsed[0]) if parsed else pointer_key


def asked_channel(pointer_key: str) -> str:
    """The channel a pointer key is of (``stable`` for ``releases/``, ``candidate`` for ``candidates/``)."""
    parsed = parse_channel_key(pointer_key)
    return parsed[1] if parsed else "stable"


def manifest_identity_problem(manifest_key: str, m: Manifest) -> str | None:
    """Why a manifest is not the one its key says (another model's, GPU's or toolchain's), or None."""
    folder = parse_plan_key(manifest_key)
    if folder is None:
        return None
    where = f"{folder.model}/{folder.gpu}/{folder.toolchain}"
    if where != identity_of(m) or not m.plan.key.startswith(folder_of(manifest_key) + "/"):
        return (f"{manifest_key} is in the folder of {where}, but the manifest there is of {identity_of(m)} (plan "
                f"{m.plan.key}): it was copied from elsewhere")
    return None


def check_identity(store: Store, key: str, pointer: ReleasePointer, stored: StoredPlan | None) -> Manifest:
    """The manifest ``pointer`` (at ``key``) names, when the chain names one identity; else ``SignatureRefused``."""
    asked, url = asked_identity(key), store.url(key)
    if pointer.identity != asked:
        raise SignatureRefused("other identity", f"{url} asks for {asked}, but the pointer there names "
                               f"{pointer.identity}: it was copied from another release")
    if pointer.channel != asked_channel(key):
        raise SignatureRefused("other identity", f"{url} is the {asked_channel(key)} channel of {asked}, but the "
                               f"pointer there is its {pointer.channel} channel's: it was copied from that channel")
    if stored is None:
        raise SignatureRefused("tampered", f"{url} points at {pointer.manifest}, which is not in the store: the "
                               "store was changed outside trtfarm (or the plan deleted by hand); find who changed "
                               "it, then `trtfarm release MANIFEST --force --reason ...` points it at a plan")
    m = stored.manifest
    if identity_of(m) != asked:
        raise SignatureRefused("other identity", f"{url} asks for {asked}, but the manifest it names "
                               f"({pointer.manifest}) is of {identity_of(m)}")
    problem = manifest_identity_problem(pointer.manifest, m)
    if problem:
        raise SignatureRefused("other identity", f"{url} asks for {asked}: {problem}")
    if m.plan.sha256 != pointer.plan_sha256:
        raise SignatureRefused("tampered", f"{url} names plan sha256 {pointer.plan_sha256[:16]}, but the manifest it "
                               f"points at ({pointer.manifest}) says {m.plan.sha256[:16]}: one of them was replaced "
                               "outside trtfarm; find who wrote it before releasing over it")
    return m


@dataclass(frozen=True)
class ReleaseVerdict:
    """A release that checked out: its claim and signer (None: no trusted keys, so no claim was checked)."""

    claim: ReleaseClaim | None
    key: TrustedKey | None
    detail: str


def check_claim(store: Store, key: str, pointer: ReleasePointer, stored: StoredPlan, trust: TrustedKeys) -> \
        tuple[TrustedKey, ReleaseClaim]:
    """The pointer's signed claim, when a trusted key signed it for this identity and these manifest bytes."""
    url, asked = store.url(key), asked_identity(key)
    if pointer.claim is None:
        raise SignatureRefused("unsigned release", f"{url} carries no signed release, and verification is on "
                               f"({trust.describe()}); {SIGN_FIX}, its releases included")
    signer, claim = verify_release(pointer.claim, trust)
    if claim.identity != asked:
        raise SignatureRefused("other identity", f"{url} asks for {asked}, but its signed release is of "
                               f"{claim.identity}")
    if claim.channel != asked_channel(key):
        raise SignatureRefused("other identity", f"{url} is the {asked_channel(key)} channel of {asked}, but its "
                               f"signed release is of the {claim.channel} channel")
    if claim.manifest != pointer.manifest:
        raise SignatureRefused("other identity", f"{url}: the signed release of {asked} names {claim.manifest}, the "
                               f"pointer {pointer.manifest}")
    if claim.manifest_sha256 != stored.manifest_sha256 or claim.plan_sha256 != stored.manifest.plan.sha256:
        raise SignatureRefused("other bytes", f"{url}: the signed release of {asked} names manifest sha256 "
                               f"{claim.manifest_sha256[:16]} (plan {claim.plan_sha256[:16]}), the store holds "
                               f"{stored.manifest_sha256[:16]} (plan {stored.manifest.plan.sha256[:16]}): replaced "
                               "after it was released")
    return signer, claim


def check_release(store: Store, key: str, pointer: ReleasePointer, stored: StoredPlan | None,
                  trust: TrustedKeys | None, accepted: AcceptedReleases | None = None, *,
                  now: datetime | None = None, max_age: timedelta | None = None,
                  freshness: bool = True) -> ReleaseVerdict:
    """Everything a consumer checks of a release before it touches the plan (the plan's signature aside).

    ``accepted``: this host's memory (rollback); ``freshness`` False skips the expiry and age (a ``release`` that is
    about to replace the claim).
    """
    check_identity(store, key, pointer, stored)
    if trust is None:
        return ReleaseVerdict(None, None, f"release unsigned-checked: no trusted keys are configured ({HOW_TO_TRUST})")
    signer, claim = check_claim(store, key, pointer, stored, trust)
    if freshness:
        check_not_frozen(claim, now or now_utc(), max_age)
    check_not_rolled_back(claim, accepted.get(store.uri, claim.track) if accepted is not None else None)
    return ReleaseVerdict(claim, signer, f"release version {claim.version} ({claim.action} by {claim.by}) signed by "
                                         f"trusted key {signer.label}, expires {claim.expires_at}")


def read_pointer(store: Store, key: str) -> tuple[ReleasePointer | None, str | None]:
    """The pointer and its ETag (both None when there is none); ``CorruptObject`` naming the key when it is damaged.

    A schema 1 pointer reads as an unsigned release of version 0; a newer schema than this trtfarm knows is
    ``PointerTooNew`` (upgrade trtfarm), never damage to repair.
    """
    blob = store.get(key)
    if blob is None:
        return None, None
    try:
        return pointer_from_json(blob.data, store.url(key)), blob.etag
    except PointerInvalid as err:
        raise CorruptObject(f"{store.url(key)}: not a release pointer ({err}); rerun "
                            "`trtfarm build` for the model (it repairs the pointer) or `trtfarm release MANIFEST "
                            "--reason ...`") from err



@dataclass(frozen=True)
class Served:
    """A release a serving host accepts: the pointer, the stored plan folder, the release's and the plan's verdicts."""

    key: str
    pointer: ReleasePointer
    stored: StoredPlan
    release: ReleaseVerdict
    verdict: object  # the plan folder's TrustVerdict


def served_release(store: Store, key: str, trust: TrustedKeys | None, accepted: AcceptedReleases | None = None, *,
                   fleet=None, max_age: timedelta | None = None, now: datetime | None = None,
                   attestations: bool = True) -> Served | None:
    """Everything a serving host checks of the release at ``key`` before any plan byte (``pull``, ``status``).

    None when no pointer is there. The chain names one identity (``check_release``), the plan's TensorRT matches its
    declared serving images, and with ``trust`` the claim and the plan folder are signed by a trusted key; a refusal
    raises (``SignatureRefused``, ``ServingImageMismatch``, ``CorruptObject``), as ``pull`` reports it.
    """
    from trtfarm.publishing.attest import read_stored

    pointer, _ = read_pointer(store, key)
    if pointer is None:
        return None
    stored = read_stored(store, pointer.manifest, attestations=attestations or trust is not None)
    return served_from(store, key, pointer, stored, trust, accepted, fleet=fleet, max_age=max_age, now=now)


def served_from(store: Store, key: str, pointer: ReleasePointer, stored: StoredPlan | None,
                trust: TrustedKeys | None, accepted: AcceptedReleases | None = None, *, fleet=None,
                max_age: timedelta | None = None, now: datetime | None = None) -> Served:
    """``served_release``'s checks of the pointer at ``key`` and the plan folder it names, both read already.

    ``stored``: the manifest the pointer names as ``read_stored`` reads it (None: not in the store), with its
    attestations where ``trust`` is given.
    """
    from trtfarm.publishing.serving_pin import check_serving_images

    released = check_release(store, key, pointer, stored, trust, accepted, now=now, max_age=max_age)
    check_serving_images(stored.manifest, store.url(pointer.manifest), fleet)
    verdict = stored.verdict(trust)
    verdict.raise_if_refused(store.url(pointer.manifest))
    return Served(key, pointer, stored, released, verdict)
