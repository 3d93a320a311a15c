"""The publish protocol: no reader ever sees half a result.

1. Stream the plan to ``<prefix>/model.plan`` create-only, computing sha256 on the way.
2. Write ``<prefix>/manifest.json`` create-only. If it exists, another worker published the same build: read it,
   and when it describes the same build the publish is done (idempotent).
Readers go manifest -> plan and check the plan's sha256 against the manifest. A plan without a manifest (a worker
that died between the two steps) is invisible to readers; the next publish of that build adopts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtfarm.errors import CorruptObject, IntegrityError, StoreError
from trtfarm.publishing import layout
from trtfarm.publishing.manifest import Manifest, ManifestInvalid, PlanInfo, manifest_from_json
from trtfarm.scratch import scratch_dir
from trtfarm.store import AlreadyExists, Store
from trtfarm.store.base import Progress


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
    """Remove a damaged publish: the manifest first (readers then see "not built", never a bad plan), then the plan."""
    store.delete(layout.manifest_key(prefix))
    store.delete(layout.plan_key(prefix))


def publish_plan(store: Store, prefix: str, plan_path: Path, manifest_for: Callable[[PlanInfo], Manifest],
                 progress: Progress | None = None) -> Published:
    """Publish ``plan_path`` and the manifest ``manifest_for(plan_info)`` under ``prefix``."""
    plan_key, manifest_key = layout.plan_key(prefix), layout.manifest_key(prefix)
    existing = read_manifest(store, manifest_key)
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
        if store.put_if_absent(manifest_key, ours.to_json()):
            return Published(manifest_key, ours, True)
        existing = read_manifest(store, manifest_key)
    if existing is None:
        raise StoreError(f"{store.url(manifest_key)}: create-only write refused but nothing is there")
    if ours is not None and not existing.same_build(ours):
        raise StoreError(f"{store.url(manifest_key)} holds a different build (digest collision?): "
                         f"{existing.build.build_digest} vs {ours.build.build_digest}")
    return Published(manifest_key, existing, False)
