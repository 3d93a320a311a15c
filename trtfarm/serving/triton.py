"""``trtfarm triton``: a Triton model repository from a model's released plans.

```
DIR/<model>/config.pbtxt                       one config, checked with Triton's schema (``triton_config``)
DIR/<model>/<version>/model.<gpu>.plan         one version per release (``versions``), one plan per GPU
DIR/<model>/<version>/model.py                 TensorRT-RTX plans: the Python backend's model (``python_model``),
DIR/<model>/<version>/model.<gpu>.plan.*.json  with each plan's manifest and attestations beside it for the loader
DIR/<gpu>/<model>/...                          instead, when two GPUs of one compute capability need two plans,
                                               or two GPUs' plans need two backends (TensorRT and TensorRT-RTX)
```
A TensorRT plan is served by the ``tensorrt_plan`` platform; a TensorRT-RTX plan by the Python backend with
trtfarm's loader, since Triton's TensorRT backend links TensorRT, not TensorRT-RTX (``triton_config.SERVED_BY``).
Every plan is sha256-checked as it is downloaded and refused when its TensorRT differs from its declared serving
image (``publishing.serving_pin``), or, with trusted keys configured, when no trusted key signed it (before any
plan byte is downloaded; without trusted keys the repository is unsigned-checked, and says so). The repository is
assembled in a scratch folder beside it and moved into place, so a server polling ``DIR`` never sees half a model.
``--channel candidate`` reads each GPU's candidate pointer (its stable one where the model has none,
``channels.serving_key``), its history giving the versions, with the same checks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trtfarm.errors import UserInputError
from trtfarm.layout import ReleaseName, channel_prefix, parse_channel_key, releases_prefix
from trtfarm.publishing.attest import StoredPlan, read_stored
from trtfarm.publishing.release import ReleasePointer
from trtfarm.publishing.release_check import (
    asked_identity,
    check_release,
    identity_of,
    manifest_identity_problem,
    read_pointer,
)
from trtfarm.publishing.serving_pin import check_serving_images
from trtfarm.releases.channels import serving_key
from trtfarm.runtime.plan_files import manifest_beside, provenance_beside, signature_beside
from trtfarm.scratch import scratch_dir
from trtfarm.serving.python_model import MODEL_PY, REQUIREMENTS
from trtfarm.serving.triton_config import config_text, served_by
from trtfarm.serving.triton_spec import TritonRequest, config_spec, plan_file
from trtfarm.serving.versions import Version, capability_collisions, model_versions
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.keys import TrustedKeys
from trtfarm.signing.release_claim import ReleaseClaim
from trtfarm.store import Store
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.vocabulary.manifest import Manifest

UNVERIFIED = "not verified here: tritonserver loading it on its GPU; load it there first"


@dataclass
class Repository:
    """One written model repository."""

    path: Path  # the repository root (Triton's --model-repository)
    gpus: list[str]
    versions: list[int]
    config: str
    notes: list[str] = field(default_factory=list)
    served_by: str = "tensorrt_plan"  # the platform, or the backend (python)


@dataclass
class TritonResult:
    """What was written, and why it is shaped so."""

    model: str
    repositories: list[Repository]
    split: list[str]  # why each GPU has its own repository (empty: one repository)
    notes: list[str]
    unverified: str = UNVERIFIED

    def to_json(self) -> dict:
        """The --json document."""
        return {"model": self.model, "split_reasons": self.split, "notes": self.notes, "unverified": self.unverified,
                "repositories": [{"path": str(r.path), "gpus": r.gpus, "versions": r.versions, "notes": r.notes,
                                  "served_by": r.served_by, "config": str(r.path / self.model / "config.pbtxt")}
                                 for r in self.repositories]}


def channel_pointers(store: Store, model: str, channel: str) -> list[tuple[str, ReleasePointer]]:
    """(key, pointer) of each (GPU, toolchain) of ``model``, read where a host of ``channel`` reads it."""
    names = {parsed[0] for root in sorted({"stable", channel}) for k in store.list(channel_prefix(root, model))
             if (parsed := parse_channel_key(k))}
    found = []
    for name in sorted(names):
        key = serving_key(store, ReleaseName(*name), channel)
        pointer, _ = read_pointer(store, key)
        if pointer is not None and pointer.identity != asked_identity(key):
            raise SignatureRefused("other identity", f"{store.url(key)} asks for {asked_identity(key)}, but the "
                                   f"pointer there names {pointer.identity}: it was copied from another release")
        found += [(key, pointer)] if pointer is not None else []
    return found


def _pointers(store: Store, fleet: Fleet, req: TritonRequest, notes: list[str]) -> list[tuple[str, ReleasePointer]]:
    """(key, pointer) of the channel's release per GPU of the repository (the fleet's, or ``--gpu``'s)."""
    unknown = [g for g in req.gpus if g not in fleet.gpus]
    if unknown:
        from trtfarm.nearest import did_you_mean

        raise UserInputError(f"--gpu {unknown} not in the fleet; {did_you_mean(unknown[0], fleet.gpus)}its GPUs are "
                             f"{', '.join(sorted(fleet.gpus))}")
    wanted = list(req.gpus) or sorted(fleet.gpus)
    found: dict[str, list[tuple[str, ReleasePointer]]] = {}
    for key, p in channel_pointers(store, req.model, req.channel):
        if p.gpu in wanted and (req.toolchain is None or p.toolchain == req.toolchain):
            found.setdefault(p.gpu, []).append((key, p))
    several = {g: [p.toolchain for _, p in ps] for g, ps in found.items() if len(ps) > 1}
    if several:
        raise UserInputError(f"{req.model!r} is released for {several} with several toolchains, and one Triton image "
                             "carries one TensorRT; pass --toolchain LABEL (one of those)")
    missing = [g for g in wanted if g not in found]
    if not found:
        raise UserInputError(f"{req.model!r} has no release for {wanted}"
                             + (f" with {req.toolchain}" if req.toolchain else "") + f" in {store.uri}; "
                             + _released_models(store, req.model) + "build and release it first (`trtfarm build`, "
                             "`trtfarm release`)")
    if missing and req.gpus:
        raise UserInputError(f"--gpu {missing}: {req.model!r} has no release there")
    if missing:
        notes.append(f"not in the repository (no release of {req.model}): {', '.join(missing)}")
    return [found[g][0] for g in sorted(found)]


def _released_models(store: Store, model: str) -> str:
    """For a model with no release at all: the nearest released model and the released ones, as a message's part."""
    from trtfarm.nearest import did_you_mean, known
    from trtfarm.publishing.catalog import store_models

    if next(iter(store.list(releases_prefix(model))), None) is not None:
        return ""
    names = store_models(store, plans=False)
    return f"{did_you_mean(model, names)}released models: {known(names)}; "


class _Manifests:
    """Manifests read once each, by key."""

    def __init__(self, store: Store) -> None:
        self.store, self.seen, self.stored = store, {}, {}

    def get(self, key: str) -> Manifest | None:
        if key not in self.seen:
            self.stored[key] = read_stored(self.store, key)
            self.seen[key] = self.stored[key].manifest if self.stored[key] else None
        return self.seen[key]

    def signed(self, key: str, trust: TrustedKeys | None, asked: str) -> str:
        """The plan's signature verdict; ``SignatureRefused`` when serving hosts would refuse it.

        ``asked``: the ``model/gpu/toolchain`` this version serves it as; a manifest of another is refused.
        """
        m = self.get(key)
        problem = manifest_identity_problem(key, m)
        if identity_of(m) != asked or problem:
            raise SignatureRefused("other identity", f"{self.store.url(key)}: released as {asked}, but "
                                   + (problem or f"the manifest is of {identity_of(m)}"))
        stored: StoredPlan = self.stored[key]
        verdict = stored.verdict(trust)
        verdict.raise_if_refused(self.store.url(key))
        return verdict.status

    def complete(self, versions: Sequence[Version], notes: list[str]) -> list[Version]:
        """The versions whose manifests are all still in the store (gc may have removed an old one)."""
        kept = []
        for v in versions:
            gone = [k for k in v.manifests.values() if self.get(k) is None]
            if gone:
                notes.append(f"version {v.number} left out: {gone[0]} is no longer in the store")
            else:
                kept.append(v)
        return kept


def _checked_releases(store: Store, pointers: Sequence[tuple[str, ReleasePointer]], manifests: _Manifests,
                      req: TritonRequest) -> list[ReleaseClaim]:
    """Check each GPU's current release (identity, signed claim, rollback, freeze) before any plan is fetched.

    The versions come from the releases in the pointers' histories, which are not signed: the newest version must be
    what each pointer names now, so a history whose last release was edited to name another plan is refused.
    """
    claims = []
    for key, p in pointers:
        manifests.get(p.manifest)
        verdict = check_release(store, key, p, manifests.stored[p.manifest], req.trust, req.accepted,
                                max_age=req.max_age)
        claims += [verdict.claim] if verdict.claim else []
        last = p.released.manifest if p.history else "nothing"
        if last != p.manifest:
            raise SignatureRefused("tampered", f"{store.url(key)}: its history's last release names {last}, the "
                                   f"pointer names {p.manifest}: the pointer was edited outside trtfarm")
    return claims


def _same_plan_shape(ms: Sequence[Manifest]) -> bool:
    return all(m.plan.io == ms[0].plan.io and m.build.profiles == ms[0].build.profiles for m in ms)


def _newest(v: Version, manifests: _Manifests, model: str) -> list[Manifest]:
    ms = [manifests.get(k) for _, k in sorted(v.manifests.items())]
    missing_io = [m.target.gpu for m in ms if not m.plan.io]
    if missing_io:
        raise UserInputError(f"the released plans of {model!r} for {missing_io} have no recorded I/O tensors (built "
                             "before trtfarm recorded them, manifest schema 1); rebuild and release them")
    if not _same_plan_shape(ms):
        raise UserInputError(f"the released plans of {model!r} for {sorted(v.manifests)} differ in I/O tensors or "
                             "profiles, and one config.pbtxt serves them all; write one repository per GPU (--gpu)")
    return ms


def _matching(versions: Sequence[Version], newest: Sequence[Manifest], manifests: _Manifests,
              notes: list[str]) -> list[Version]:
    """Older versions whose plans have the newest one's I/O and profiles (one config serves every version)."""
    kept = []
    for v in versions:
        if _same_plan_shape([*newest, *(manifests.get(k) for k in v.manifests.values())]):
            kept.append(v)
        else:
            notes.append(f"version {v.number} left out: its plans have other I/O tensors or profiles than the newest")
    return kept


def _repository(store: Store, req: TritonRequest, root: Path, pointers: Sequence[ReleasePointer],
                manifests: _Manifests, fleet: Fleet) -> Repository:
    notes: list[str] = []
    versions = manifests.complete(model_versions(pointers), notes)[-(req.keep + 1):]
    if not versions:
        raise UserInputError(f"no release of {req.model!r} covers {[p.gpu for p in pointers]} with its plans still "
                             "in the store; release the model again")
    newest = _newest(versions[-1], manifests, req.model)
    versions = _matching(versions, newest, manifests, notes)
    toolchain = {p.gpu: p.toolchain for p in pointers}
    for v in versions:
        for gpu, key in v.manifests.items():
            check_serving_images(manifests.get(key), store.url(key), fleet)
            manifests.signed(key, req.trust, f"{req.model}/{gpu}/{toolchain[gpu]}")
    notes.append(f"signatures: every plan signed by a trusted key ({req.trust.describe()})" if req.trust else
                 "unsigned-checked: no trusted keys configured (TRTFARM_TRUSTED_KEYS)")
    spec = config_spec(req, newest, notes)
    text = config_text(spec)
    _write(store, root / req.model, text, versions, manifests, spec.served_by)
    return Repository(root, sorted(p.gpu for p in pointers), [v.number for v in versions], text, notes,
                      spec.served_by)


def _beside_plan(folder: Path, gpu: str, stored: StoredPlan) -> None:
    """A plan's manifest, signature and provenance beside it, byte for byte, as ``pull`` puts them (the loader's)."""
    plan = folder / plan_file(gpu)
    manifest_beside(plan).write_bytes(stored.manifest_bytes)
    for path, data in ((signature_beside(plan), stored.signature), (provenance_beside(plan), stored.provenance)):
        if data is not None:
            path.write_bytes(data)


def _write(store: Store, target: Path, text: str, versions: Sequence[Version], manifests: _Manifests,
           served: str) -> None:
    """Assemble the model folder beside ``target`` and move it into place (the old one goes with the scratch).

    On the Python backend each version folder also holds ``model.py`` and each plan's manifest and attestations.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with scratch_dir(".tmp-triton-", root=target.parent) as tmp:
        staged = tmp / "model"
        for v in versions:
            folder = staged / str(v.number)
            folder.mkdir(parents=True, exist_ok=True)
            for gpu, key in sorted(v.manifests.items()):
                m = manifests.get(key)
                store.download_file(m.plan.key, folder / plan_file(gpu), sha256=m.plan.sha256)
                if served == "python":
                    _beside_plan(folder, gpu, manifests.stored[key])
            if served == "python":
                (folder / "model.py").write_text(MODEL_PY)
        (staged / "config.pbtxt").write_text(text)
        if target.exists():
            os.replace(target, tmp / "old")
        os.replace(staged, target)


def triton_repositories(store: Store, fleet: Fleet, req: TritonRequest) -> TritonResult:
    """Write the Triton model repository (or one per GPU model) for ``req.model``'s released plans."""
    if req.keep < 0:
        raise UserInputError("--keep must be 0 or more (older versions kept beside the newest)")
    notes: list[str] = []
    keyed = _pointers(store, fleet, req, notes)
    manifests = _Manifests(store)
    claims = _checked_releases(store, keyed, manifests, req)
    pointers = [p for _, p in keyed]
    if req.channel != "stable":
        notes.append(f"channel {req.channel}: " + ", ".join(f"{p.gpu} from {key}" for key, p in keyed))
    combined = manifests.complete(model_versions(pointers), [])[-(req.keep + 1):]
    backends = {served_by(manifests.get(p.manifest).target.flavour) for p in pointers}
    # the Python backend's model.py picks a plan by GPU model; the TensorRT backend by compute capability only
    splits = capability_collisions(combined, manifests.seen) if backends == {"tensorrt_plan"} else []
    reasons = [s.reason() for s in splits] + _backend_split(pointers, manifests)
    if reasons:
        groups = [(req.repo / p.gpu, [p]) for p in pointers]
    else:
        groups = [(req.repo, list(pointers))]
    repos = [_repository(store, req, root, group, manifests, fleet) for root, group in groups]
    for claim in claims if req.accepted is not None else []:
        req.accepted.remember(store.uri, claim)
    if any(r.served_by == "python" for r in repos):
        notes.append(f"Python backend (TensorRT-RTX): the image needs {REQUIREMENTS}")
    return TritonResult(req.model, repos, reasons, notes)


def _backend_split(pointers: Sequence[ReleasePointer], manifests: _Manifests) -> list[str]:
    """Why GPUs whose plans need different Triton backends (TensorRT, TensorRT-RTX) cannot share a repository."""
    by: dict[str, list[str]] = {}
    for p in pointers:
        by.setdefault(served_by(manifests.get(p.manifest).target.flavour), []).append(p.gpu)
    if len(by) < 2:
        return []
    return [" and ".join(f"{', '.join(gpus)} ({served})" for served, gpus in sorted(by.items(), key=lambda i: i[1]))
            + " need two Triton backends: one repository per GPU model"]
