"""A plan's files on disk: what ``pull`` writes beside a plan, and finding them from the plan or its manifest.

``model.plan`` has its manifest (``model.plan.manifest.json``, the exact bytes), signature bundle, provenance statement
and the signed release it was pulled by beside it; a store's plan folder has ``manifest.json`` and the attestations
named by the manifest's sha256. ``find_files`` reads whichever is there, for ``load_plan``, ``verify`` and serving.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import Manifest, manifest_from_json


def manifest_beside(plan: Path) -> Path:
    """Where ``pull`` puts a plan's manifest: ``model.plan`` -> ``model.plan.manifest.json``."""
    return plan.with_name(plan.name + ".manifest.json")


def signature_beside(plan: Path) -> Path:
    """Where ``pull`` puts a plan's signature bundle: ``model.plan`` -> ``model.plan.sigstore.json``."""
    return plan.with_name(plan.name + layout.SIGNATURE_SUFFIX)


def release_beside(plan: Path) -> Path:
    """Where ``pull`` puts the signed release it pulled by: ``model.plan`` -> ``model.plan.release.json``."""
    return plan.with_name(plan.name + ".release.json")


def provenance_beside(plan: Path) -> Path:
    """Where ``pull`` puts a plan's provenance statement: ``model.plan`` -> ``model.plan.provenance.json``."""
    return plan.with_name(plan.name + ".provenance.json")


@dataclass(frozen=True)
class PlanFiles:
    """A plan on disk with its manifest (exact bytes), and the signature and provenance found beside them."""

    plan: Path
    manifest_path: Path
    manifest: Manifest
    manifest_bytes: bytes
    signature: bytes | None
    provenance: bytes | None
    release: bytes | None = None  # the signed release claim ``pull`` wrote beside the plan


def _first(*paths: Path) -> bytes | None:
    return next((p.read_bytes() for p in paths if p.is_file()), None)


def find_files(ref: Path) -> PlanFiles:
    """Like ``find_pair``, with the attestations: beside a pulled plan, or in a store's plan folder."""
    plan, mpath = _locate(Path(ref))
    try:
        data = mpath.read_bytes()
    except OSError as err:
        raise UserInputError(f"{mpath}: cannot read the manifest ({err.strerror}); pass a plan with its manifest "
                             "beside it, or a manifest's path") from err
    manifest = manifest_from_json(data, str(mpath))
    if not plan.is_file():
        raise UserInputError(f"{plan}: the plan named by the manifest is not there")
    msha = hashlib.sha256(data).hexdigest()
    folder = mpath.parent
    return PlanFiles(plan, mpath, manifest, data,
                     _first(signature_beside(plan), folder / layout.signature_name(msha)),
                     _first(provenance_beside(plan), folder / layout.provenance_name(msha)),
                     _first(release_beside(plan)))


def find_pair(ref: Path) -> tuple[Path, Manifest]:
    """Accept a plan (manifest beside it) or a manifest (plan beside it, or at its key under a store root)."""
    files = find_files(ref)
    return files.plan, files.manifest


def _locate(ref: Path) -> tuple[Path, Path]:
    """(plan, manifest path) of a plan or a manifest."""
    if not ref.exists() or ref.is_dir():
        raise UserInputError(f"{ref}: " + ("is a folder; give the plan file or its manifest" if ref.is_dir() else
                                           "no such file; give the plan that `trtfarm pull` wrote, or its manifest"))
    if ref.name.endswith(".json"):
        if not ref.is_file():
            raise UserInputError(f"{ref}: no such manifest")
        candidates = [c for c in (ref.with_name(ref.name.removesuffix(".manifest.json")), ref.with_name("model.plan"))
                      if c != ref]  # X.plan.manifest.json names X.plan (pull's), any manifest model.plan (a store's)
        return next((c for c in candidates if c.is_file()), candidates[0]), ref
    mpath = manifest_beside(ref)
    if not mpath.is_file() and ref.with_name("manifest.json").is_file():
        mpath = ref.with_name("manifest.json")
    if not mpath.is_file():
        raise UserInputError(f"{ref}: no manifest beside it ({mpath.name} or manifest.json); `trtfarm pull` "
                             "writes one, or pass the manifest itself")
    return ref, mpath
