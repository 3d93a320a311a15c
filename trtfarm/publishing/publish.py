"""The publish protocol: no reader ever sees half a result.

1. Stream the plan to ``<prefix>/model.plan`` create-only, computing sha256 on the way.
2. Write the provenance and (with a signing key) the signature of the manifest about to be written, create-only,
   named by that manifest's sha256 (attest.py).
3. Write ``<prefix>/manifest.json`` create-only. If it exists, another worker published the same build: delete the
   pair of step 2 (it describes a manifest that is not there), read the stored manifest, and when it describes the
   same build the publish is done (idempotent).
Readers go manifest -> signature and provenance (by the manifest's sha256) -> plan, and check the plan's sha256
against the manifest. A plan without a manifest (a worker that died between the steps) is invisible to readers; the
next publish of that build adopts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.errors import CorruptObject, IntegrityError, StoreError
from trtfarm.publishing.attest import Attestation, attestation_objects, folder_attestations, write_attestations
from trtfarm.scratch import scratch_dir
from trtfarm.store import AlreadyExists, Store
from trtfarm.store.base import Progress
from trtfarm.vocabulary.manifest import Manifest, ManifestInvalid, PlanInfo, manifest_from_json


@dataclass(frozen=True)
class Published:
    """The manifest now stored for this build, and whether this call wrote it."""

    manifest_key: str
    manifest: Manifest
    created: bool


def read_manifest(store: Store, key: str) -> Manifest | None:
    """The manifest at ``key``, or None; ``CorruptObject`` (naming the key) when the object is not a manifest."""
    blob = store.get(key)
    if blob is None:
        return None
    try:
        return manifest_from_json(blob.data, store.url(key))
    except ManifestInvalid as err:
        raise CorruptObject(f"{err} Rebuild the plan (`trtfarm build` replaces a damaged manifest of its own build) "
                            "or delete the key.") from err


def _stored_plan_info(store: Store, key: str) -> tuple[str, int]:
    """Hash a plan another worker stored (rare path: it won the create-only race)."""
    with scratch_dir("trtfarm-adopt-") as tmp:
        dest = tmp / layout.PLAN_NAME
        size = store.download_file(key, dest)
        from trtfarm.identity import sha256_file

        return sha256_file(dest), size


def plan_intact(store: Store, manifest: Manifest) -> str | None:
    """None when the plan object is there with the size its manifest records; else what is wrong with it.

    A size check (one HEAD); ``trtfarm verify --store`` re-hashes the bytes.
    """
    size = store.size(manifest.plan.key)
    if size is None:
        return f"its plan {manifest.plan.key} is missing"
    if size != manifest.plan.bytes:
        return f"its plan {manifest.plan.key} has {size:,} bytes, the manifest says {manifest.plan.bytes:,}"
    return None


def plan_rehash(store: Store, manifest: Manifest) -> str | None:
    """None when the plan object's bytes hash to the manifest's sha256 (downloaded and re-hashed); else why not."""
    with scratch_dir("trtfarm-verify-") as tmp:
        try:
            store.download_file(manifest.plan.key, tmp / layout.PLAN_NAME, sha256=manifest.plan.sha256)
        except IntegrityError as err:
            return str(err)
    return None


def withdraw(store: Store, prefix: str) -> None:
    """Remove a damaged publish: the manifest (readers then see "not built", never a bad plan), its pair, the plan."""
    store.delete(layout.manifest_key(prefix))
    for key in folder_attestations(store, prefix):
        store.delete(key)
    store.delete(layout.plan_key(prefix))


def _create_manifest(store: Store, prefix: str, manifest: Manifest, attest: Attestation | None) -> bool:
    """Steps 2 and 3: the attestations, then the manifest; False (and our attestations gone) when another won."""
    data = manifest.to_json()
    written: list[str] = []
    try:
        for key, blob in (attestation_objects(prefix, manifest, data, attest) if attest else {}).items():
            written += write_attestations(store, {key: blob})
        if store.put_if_absent(layout.manifest_key(prefix), data):
            return True
    except StoreError:  # a full or failing store: nothing of this manifest's stays behind (the plan is adopted later)
        for key in written:
            try:
                store.delete(key)
            except StoreError:
                pass
        raise
    stored = store.get(layout.manifest_key(prefix))
    if stored is not None and stored.data == data:
        return False  # the winner wrote these very bytes: the pair is as much its as ours
    for key in written:  # they describe our manifest, which lost the create-only write: nobody can reach them
        store.delete(key)
    return False


def publish_plan(store: Store, prefix: str, plan_path: Path, manifest_for: Callable[[PlanInfo], Manifest],
                 progress: Progress | None = None, attest: Attestation | None = None,
                 absent: bool = False) -> Published:
    """Publish ``plan_path`` and the manifest ``manifest_for(plan_info)`` under ``prefix``.

    ``attest`` adds the provenance of the manifest and, with a signer, the signature over plan, manifest and
    provenance; both are stored before the manifest makes the plan visible. ``absent``: the caller found no manifest
    there (planning did), so it is not read first; a publish since then is met by the create-only writes.
    """
    plan_key, manifest_key = layout.plan_key(prefix), layout.manifest_key(prefix)
    existing = None if absent else read_manifest(store, manifest_key)
    if existing is not None and plan_intact(store, existing) is not None:
        withdraw(store, prefix)  # a damaged or missing plan object: publish this build afresh
        existing = None
    if existing is None:
        try:
            up = store.upload_file(plan_key, plan_path, progress)
            sha, size = up.sha256, up.size
        except AlreadyExists:
            existing = read_manifest(store, manifest_key)
            if existing is None:  # the other worker is mid-publish or died: adopt the stored plan
                sha, size = _stored_plan_info(store, plan_key)
    ours = None
    if existing is None:
        ours = manifest_for(PlanInfo(key=plan_key, bytes=size, sha256=sha))
        if _create_manifest(store, prefix, ours, attest):
            return Published(manifest_key, ours, True)
        existing = read_manifest(store, manifest_key)
    if existing is None:
        raise StoreError(f"{store.url(manifest_key)}: create-only write refused but nothing is there")
    if ours is not None and not existing.same_build(ours):
        raise StoreError(f"{store.url(manifest_key)} holds a different build (digest collision?): "
                         f"{existing.build.build_digest} vs {ours.build.build_digest}")
    return Published(manifest_key, existing, False)
