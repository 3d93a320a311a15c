"""The provenance and signature beside a manifest: written before it, read and checked by every consumer.

Both objects are named by the sha256 of the manifest bytes they describe (``layout.provenance_key`` and
``layout.signature_key``). A publisher writes its pair create-only, then its manifest create-only; a publisher
whose manifest loses that race (the idempotent 412 path) deletes its own pair, which nobody can reach. So a reader
never sees a manifest without the signature it was published with, nor a signature of another manifest.

The signature is an OpenSSF model-signing bundle over three files of the plan folder: ``model.plan``,
``manifest.json`` and the provenance (by its name in the folder).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from trtfarm import layout
from trtfarm.errors import CorruptObject
from trtfarm.signing.bundle import sign_resources
from trtfarm.signing.keys import Signer, TrustedKeys
from trtfarm.signing.verdict import TrustVerdict, check_signature
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest, ManifestInvalid, manifest_from_json

ProvenanceFor = Callable[[Manifest, str], bytes]  # (manifest, its sha256) -> the provenance statement's bytes


@dataclass(frozen=True)
class Attestation:
    """How a publish attests its plan: the provenance of a manifest, and the signer (None: unsigned)."""

    provenance_for: ProvenanceFor
    signer: Signer | None = None


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def signed_names(manifest_sha256: str) -> tuple[str, str, str]:
    """The file names a plan folder's signature covers: plan, manifest, provenance."""
    return layout.PLAN_NAME, layout.MANIFEST_NAME, layout.provenance_name(manifest_sha256)


def attestation_objects(prefix: str, manifest: Manifest, manifest_bytes: bytes,
                        attest: Attestation) -> dict[str, bytes]:
    """The provenance (and, with a signer, the signature) to store beside ``manifest_bytes``, by key."""
    msha = sha256_bytes(manifest_bytes)
    provenance = attest.provenance_for(manifest, msha)
    objects = {layout.provenance_key(prefix, msha): provenance}
    if attest.signer is not None:
        plan, man, prov = signed_names(msha)
        resources = {plan: manifest.plan.sha256, man: msha, prov: sha256_bytes(provenance)}
        objects[layout.signature_key(prefix, msha)] = sign_resources(
            attest.signer, layout.leaf_of(prefix), resources, ignore_paths=[layout.signature_name(msha)])
    return objects


def write_attestations(store: Store, objects: dict[str, bytes]) -> list[str]:
    """Write each object create-only; returns the keys this call wrote (an existing one is left as it is)."""
    return [key for key, data in objects.items() if store.put_if_absent(key, data)]


@dataclass(frozen=True)
class StoredPlan:
    """A manifest as stored (its exact bytes) with the provenance and signature named by its sha256."""

    manifest_key: str
    manifest: Manifest
    manifest_bytes: bytes
    provenance: bytes | None
    signature: bytes | None

    @property
    def manifest_sha256(self) -> str:
        """The sha256 of the manifest bytes."""
        return sha256_bytes(self.manifest_bytes)

    def verdict(self, trust: TrustedKeys | None, plan_sha256: str | None = None) -> TrustVerdict:
        """Judge the signature; the plan's digest is the manifest's unless the bytes at hand say otherwise."""
        plan, man, prov = signed_names(self.manifest_sha256)
        actual = {plan: plan_sha256 or self.manifest.plan.sha256, man: self.manifest_sha256}
        if self.provenance is not None:
            actual[prov] = sha256_bytes(self.provenance)
        return check_signature(trust, self.signature, actual, host_code=self.manifest.target.version_compatible)


def read_stored(store: Store, manifest_key: str, attestations: bool = True) -> StoredPlan | None:
    """The manifest at ``manifest_key`` with its attestations, or None; ``CorruptObject`` when it is not a manifest.

    ``attestations=False``: the manifest alone (for a check of its identity, no signature judged).
    """
    blob = store.get(manifest_key)
    if blob is None:
        return None
    try:
        manifest = manifest_from_json(blob.data, store.url(manifest_key))
    except ManifestInvalid as err:
        raise CorruptObject(f"{err} It is not what trtfarm published there: find who changed it (`trtfarm build` "
                            "republishes a damaged manifest of its own build).") from err
    if not attestations:
        return StoredPlan(manifest_key, manifest, blob.data, None, None)
    msha, prefix = sha256_bytes(blob.data), layout.folder_of(manifest_key)
    prov, sig = store.get(layout.provenance_key(prefix, msha)), store.get(layout.signature_key(prefix, msha))
    return StoredPlan(manifest_key, manifest, blob.data, prov.data if prov else None, sig.data if sig else None)


def folder_attestations(store: Store, prefix: str) -> list[str]:
    """Every provenance and signature object in a plan folder (of any manifest)."""
    return [k for k in store.list(f"{prefix}/") if layout.is_attestation(layout.leaf_of(k))]
