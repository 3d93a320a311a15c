"""``trtfarm pull``: on a serving host, fetch the released plan for this GPU and toolchain, checked.

The release (pointer, manifest and signed claim name the asked model, GPU and toolchain; no rollback, no freeze) and
the signature are checked against the trusted keys before any plan byte is downloaded; the plan is then checked
against the manifest's sha256 on the way. The manifest, its provenance, its signature and the signed release land beside
the plan byte for byte, so ``trtfarm verify`` and ``load_plan`` check the same signature again on the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from trtfarm.errors import OutputRefused, UserInputError
from trtfarm.layout import ReleaseName, channel_key, toolchain_label
from trtfarm.machine.gpu import GpuScan
from trtfarm.machine.match import DeviceSpec, best_key
from trtfarm.publishing.release import list_pointers
from trtfarm.publishing.release_check import ReleaseVerdict, served_release
from trtfarm.releases.channels import serving_key
from trtfarm.runtime.plan_files import manifest_beside, provenance_beside, release_beside, signature_beside
from trtfarm.signing.accepted import AcceptedReleases
from trtfarm.signing.keys import TrustedKeys
from trtfarm.signing.verdict import TrustVerdict
from trtfarm.store import Store
from trtfarm.store.base import Progress
from trtfarm.store.resume import download_resumable
from trtfarm.vocabulary.fleet import Fleet


@dataclass(frozen=True)
class Pulled:
    """A plan on local disk, checked against its manifest."""

    plan: Path
    manifest_path: Path
    pointer_key: str
    bytes: int
    verdict: TrustVerdict
    release: ReleaseVerdict
    transfer: str = ""  # how the download began when not afresh: resumed, started over, a stale part removed


def local_gpu_key(fleet: Fleet, gpus: GpuScan, override: str | None) -> str:
    """The fleet's key for this host's GPU (``--gpu`` wins); a clear error when it is unknown."""
    if override:
        if override not in fleet.gpus:
            from trtfarm.nearest import did_you_mean

            raise UserInputError(f"--gpu {override!r} is not in the fleet; {did_you_mean(override, fleet.gpus)}"
                                 f"known GPUs: {', '.join(sorted(fleet.gpus))}")
        return override
    key = fleet_gpu_of(fleet, gpus)
    if key:
        return key
    raise UserInputError(f"this host has {gpus.describe()}, which matches no GPU in the fleet; pass --gpu KEY "
                         f"(one of {sorted(fleet.gpus)}) to pull for another host")


def fleet_gpu_of(fleet: Fleet, scan: GpuScan) -> str | None:
    """The fleet GPU this host's device is; None when no device is one of the fleet's GPUs.

    machine/match.py's rule, the one ``verify`` and the worker's self-check judge by: the MIG profile, then the PCI id
    where the fleet declares ids, else NVML name and compute capability.
    """
    specs = {key: DeviceSpec(key, g.nvml_name, g.compute_capability, tuple(g.pci_ids), "", g.mig)
             for key, g in fleet.gpus.items()}  # a GPU's own device: no group, no portable class
    return best_key(specs, scan)


def local_toolchains(installed: dict[str, str | None], override: str | None) -> list[str]:
    """Toolchain labels this host can run, most specific first (``--toolchain`` wins)."""
    if override:
        return [override]
    labels = [toolchain_label(flavour, v) for flavour, v in installed.items() if v]
    if not labels:
        raise UserInputError("neither tensorrt nor tensorrt_rtx imports here; install the serving toolchain, or "
                             "pass --toolchain tensorrt-11.4.0.106 (say) to pull for another host")
    return labels


def _remember(accepted: AcceptedReleases, store_uri: str, claim, written: list[Path]) -> None:
    """Remember the accepted release; when that fails, the pull is refused and what it wrote is removed."""
    try:
        accepted.remember(store_uri, claim)
    except OutputRefused:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def pull_release(store: Store, model: str, gpu: str, toolchains: list[str], dest: Path | None = None,
                 progress: Progress | None = None, fleet: Fleet | None = None,
                 trust: TrustedKeys | None = None, accepted: AcceptedReleases | None = None,
                 max_age: timedelta | None = None, channel: str = "stable") -> Pulled:
    """Download the plan released for (model, gpu, one of toolchains) to ``dest``, sha256-checked.

    Before any plan byte: the pointer, its manifest and that manifest's folder must name this (model, GPU,
    toolchain) (``SignatureRefused``: ``other identity``, or ``tampered`` when the pointer and manifest disagree); a
    plan whose TensorRT differs from its declared serving image is refused (``ServingImageMismatch``); with ``trust``,
    the release must carry a claim signed by a trusted key, not older than what ``accepted`` (this host's memory)
    holds and not frozen (``max_age``), and the plan folder must be signed (``SignatureRefused``). Without ``trust``
    the pull is unsigned-checked, and a version-compatible plan refused. The accepted release is remembered.
    ``channel``: ``stable`` (what serving hosts run) or ``candidate`` (a canary host; a model without promotion:
    has none, and its candidate channel follows stable).
    """
    if accepted is not None:  # refused before any byte lands at dest, never after the plan is there
        accepted.check_writable()
    for label in toolchains:
        key = serving_key(store, ReleaseName(model, gpu, label), channel)
        served = served_release(store, key, trust, accepted, fleet=fleet, max_age=max_age)  # status asks the same
        if served is None:
            continue
        pointer, stored, released, verdict = served.pointer, served.stored, served.release, served.verdict
        manifest = stored.manifest
        dest = Path(dest or f"{model}.plan")
        if dest.is_dir():  # --to a folder: the plan goes in it, named after the model
            dest = dest / f"{model}.plan"
        got = download_resumable(store, manifest.plan.key, dest, manifest.plan.sha256, progress)  # a killed pull's
        size = got.size  # part file is resumed (ranged read) or removed: nothing is left beside dest
        mpath = manifest_beside(dest)
        mpath.write_bytes(stored.manifest_bytes)
        claim = json.dumps(pointer.claim, indent=2).encode() if pointer.claim is not None else None
        for path, data in ((signature_beside(dest), stored.signature), (provenance_beside(dest), stored.provenance),
                           (release_beside(dest), claim)):
            if data is None:
                path.unlink(missing_ok=True)  # never leave an older pull's attestation beside this plan
            else:
                path.write_bytes(data)
        if accepted is not None and released.claim is not None:
            _remember(accepted, store.uri, released.claim, [dest, mpath, signature_beside(dest),
                                                           provenance_beside(dest), release_beside(dest)])
        return Pulled(dest, mpath, key, size, verdict, released, got.note)
    raise UserInputError(_not_served(store, model, gpu, toolchains, channel))


def _not_served(store: Store, model: str, gpu: str, toolchains: list[str], channel: str) -> str:
    """Why no plan is served for (model, GPU, toolchains) on ``channel``, and the next right command.

    A plan built and waiting in the candidate channel is not a plan to build again: it waits for ``promote``, or a
    canary host pulls it with ``--channel candidate``.
    """
    asked = f"{model!r} for GPU {gpu!r} with {' or '.join(toolchains)}"
    waiting = [t for t in toolchains if store.get(channel_key(model, gpu, t, "candidate")) is not None]
    if channel == "stable" and waiting:
        return (f"no stable release of {asked} yet: its plan is built and waits in the candidate channel. "
                f"`trtfarm promote {model}` moves it to stable once its gates hold; a canary host pulls it now with "
                "`--channel candidate`.")
    existing = [f"{p.gpu} / {p.toolchain}" for p in list_pointers(store, model)]
    return (f"no released plan of {asked}. " + (f"Released: {', '.join(existing)}." if existing else
                                                 f"{model!r} has no releases in {store.uri} yet.")
            + " Build it for this target, or release a built plan.")
