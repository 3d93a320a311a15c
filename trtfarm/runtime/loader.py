"""Load a plan only when it is the right one: ``load_plan`` and ``trtfarm verify``.

Before deserialising: the plan's sha256 against its manifest, the plan header (no GPU needed), the model digest the
caller expects, the installed toolchain flavour and version, the local GPU model and compute capability, and the
signature against the fleet's trusted keys (``TRTFARM_TRUSTED_KEYS`` or gpu_targets.yaml). Then the runtime itself.
Any difference raises ``PlanMismatch`` naming what differs and how to get the right plan; an untrusted plan raises
``UntrustedPlan`` (a ``PlanMismatch``) and is never deserialised. ``load_plan`` serves one release channel: the
signed release ``pull`` wrote beside the plan must be of it, and ``report=True`` records the load's receipt there.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.identity import sha256_file
from trtfarm.machine.flavour import installed_version
from trtfarm.machine.gpu import GpuScan, scan_gpus
from trtfarm.machine.header import read_plan_header, version_matches
from trtfarm.machine.match import best_fit
from trtfarm.project.fleet_file import signing_settings
from trtfarm.runtime.load_receipt import open_by, record_load
from trtfarm.runtime.plan_files import PlanFiles, find_files
from trtfarm.vocabulary.device_spec import spec_of_manifest
from trtfarm.vocabulary.manifest import Manifest

FIX = "Run `trtfarm pull MODEL` on this host to fetch the plan released for its GPU and toolchain."


class PlanMismatch(UserInputError):
    """The plan is not the right one for this host (or is damaged); ``differences`` lists each problem."""

    def __init__(self, plan: Path, differences: list[str]) -> None:
        self.differences = differences
        super().__init__(f"{plan}: refusing to load it:\n" + "\n".join(f"  - {d}" for d in differences) + f"\n{FIX}")


class RuntimeRefused(PlanMismatch):
    """The plan matched this host in every check, and the runtime refused it (a failed receipt; not one before)."""


class UntrustedPlan(PlanMismatch):
    """The plan is not signed by a key the fleet trusts (or is version-compatible and unsigned-checked)."""

    def __init__(self, plan: Path, differences: list[str]) -> None:
        self.differences = differences
        UserInputError.__init__(self, f"{plan}: refusing to load it: " + "; ".join(differences))


@dataclass(frozen=True)
class VerifyCheck:
    """One check of ``verify`` on a plan file (not the manifest's ``Check`` of a build's verification)."""

    name: str
    ok: bool | None  # None: could not run here
    detail: str


def configured_trust():
    """The fleet's trusted keys (``TRTFARM_TRUSTED_KEYS``, else gpu_targets.yaml), or None when none is set."""
    return signing_settings(only="trust").trusted_keys()


def _identity(m: Manifest) -> str:
    return f"{m.model.name}/{m.target.gpu}/{layout.toolchain_label(m.target.flavour, m.target.toolchain_version)}"


def channel_problem(claim, channel: str | None) -> str | None:
    """Why a release of ``claim``'s channel is not served on a host of ``channel`` (None: any channel), or None.

    A candidate host may serve a stable release: a model without ``promotion:`` has no candidate pointer, and its
    candidate channel follows stable (``channels.serving_key``). A stable host serves stable releases only.
    """
    if channel is None or claim.channel == channel or (channel, claim.channel) == ("candidate", "stable"):
        return None
    return (f"other channel: the signed release beside the plan is of the {claim.channel} channel of "
            f"{claim.identity}, and this host serves {channel}; `trtfarm pull {claim.model} --channel {channel}`")


def _unverified(release: bytes):
    from trtfarm.signing.release_claim import unverified_claim

    try:
        return unverified_claim(json.loads(release))
    except ValueError:
        return None


def release_problem(files: PlanFiles, trust, msha: str, channel: str | None = None,
                    remembered=None) -> str | None:
    """Why the signed release beside a pulled plan does not release this manifest, or None (none beside, or fine).

    ``channel``: the channel this host serves (``channel_problem``); without ``trust`` the claim's channel is read
    unverified (a mix-up is caught, not an attacker: without keys nothing beside the plan is proven).
    ``remembered(track)``: this host's accepted release of that track (a lower version is a ``rollback``).
    """
    from trtfarm.signing.accepted import check_not_rolled_back
    from trtfarm.signing.bundle import SignatureRefused
    from trtfarm.signing.release_claim import verify_release

    if files.release is None or trust is None:
        claim = _unverified(files.release) if files.release is not None else None
        return channel_problem(claim, channel) if claim is not None else None
    try:
        _, claim = verify_release(json.loads(files.release), trust)
        if remembered is not None:
            check_not_rolled_back(claim, remembered(claim.track))
    except ValueError:
        return "malformed: the release beside the plan is not JSON"
    except SignatureRefused as err:
        return f"{err.reason}: the release beside the plan: {err.detail}"
    if claim.identity != _identity(files.manifest) or claim.manifest_sha256 != msha:
        return (f"other identity: the signed release beside the plan is of {claim.identity} (manifest sha256 "
                f"{claim.manifest_sha256[:16]}), the manifest is of {_identity(files.manifest)} (sha256 {msha[:16]})")
    return channel_problem(claim, channel)


def signature_check(files: PlanFiles, trust, plan_sha256: str, channel: str | None = None,
                    remembered=None) -> VerifyCheck:
    """The ``signature`` check: signed by a trusted key (ok), unsigned-checked (None: no trust), or refused.

    With a signed release beside the plan (what ``pull`` writes), it must name this manifest and its identity, and
    be of ``channel`` (``release_problem``).
    """
    from trtfarm.signing.verdict import check_signature

    msha = hashlib.sha256(files.manifest_bytes).hexdigest()
    actual = {layout.PLAN_NAME: plan_sha256, layout.MANIFEST_NAME: msha}
    if files.provenance is not None:
        actual[layout.provenance_name(msha)] = hashlib.sha256(files.provenance).hexdigest()
    verdict = check_signature(trust, files.signature, actual, host_code=files.manifest.target.version_compatible)
    problem = release_problem(files, trust, msha, channel, remembered) if verdict.ok is not False else None
    return VerifyCheck("signature", False if problem else verdict.ok, problem or verdict.detail)


def gpu_check(m: Manifest, gpus: GpuScan) -> VerifyCheck:
    """The ``gpu`` check: a local device serves the plan's device (by PCI id where declared; machine/match.py)."""
    found = best_fit(spec_of_manifest(m), gpus)
    head = (f"plan is for {m.target.gpu_name} (cc {m.target.compute_capability}, class {m.target.compat_class}"
            f"{', MIG ' + m.target.mig if m.target.mig else ''}); this host has {gpus.describe()}")
    return VerifyCheck("gpu", found.ok, f"{head}: {found.reason}" if gpus.gpus else head)


def static_checks(plan: Path, m: Manifest, *, expected_onnx_digest: str | None = None,
                  expected_model: str | None = None,
                  installed: Mapping[str, str | None] | None = None, gpus: GpuScan | None = None,
                  files: PlanFiles | None = None, trust=None, channel: str | None = None,
                  remembered=None) -> list[VerifyCheck]:
    """Everything that can be checked without running the engine; with ``files``, the signature against ``trust``.

    ``channel`` and ``remembered``: what ``signature_check`` holds the release beside the plan to (None: nothing).
    """
    checks = []
    digest = sha256_file(plan)
    checks.append(VerifyCheck("sha256", digest == m.plan.sha256, f"plan sha256 {digest[:16]}…, manifest says "
                        f"{m.plan.sha256[:16]}…" + ("" if digest == m.plan.sha256 else " (the file is damaged or "
                                                                                         "not this manifest's plan)")))
    h = read_plan_header(plan)
    header_ok = h.magic_ok and h.flavour == m.target.flavour and version_matches(h.version, m.target.toolchain_version)
    checks.append(VerifyCheck("header", header_ok, f"header: {h.flavour} {h.version}" if h.magic_ok else
                        "header: not a TensorRT-family plan (bad magic)"))
    if not header_ok and h.magic_ok:
        checks[-1] = VerifyCheck("header", False, f"header says {h.flavour} {h.version}, the manifest says "
                           f"{m.target.flavour} {m.target.toolchain_version}")
    if expected_model:
        checks.append(VerifyCheck("identity", expected_model == m.model.name, f"plan is of {_identity(m)}, expected "
                            f"model {expected_model}"))
    if expected_onnx_digest:
        same = expected_onnx_digest == m.model.onnx_digest
        checks.append(VerifyCheck("model", same, f"plan is of {m.model.name} onnx {m.model.onnx_digest[:12]}, expected "
                            f"onnx {expected_onnx_digest[:12]}"))
    have = (installed or {}).get(m.target.flavour) if installed is not None else installed_version(m.target.flavour)
    checks.append(VerifyCheck("toolchain", bool(have) and version_matches(have, m.target.toolchain_version),
                        f"plan needs {m.target.flavour} {m.target.toolchain_version}; installed: "
                        f"{have or 'not importable'}"))
    checks.append(gpu_check(m, gpus or scan_gpus()))
    if files is not None:
        checks.append(signature_check(files, trust, digest, channel, remembered))
    return checks


def validity_verdict(trt, data: bytes) -> tuple[bool | None, str]:
    """The runtime's header-only check, before deserialising: (False, the verdict in one line) when it refuses.

    TensorRT-RTX's ``Runtime.get_engine_validity`` reads the plan's header (``engine_header_size`` bytes) and says
    VALID, SUBOPTIMAL or INVALID with diagnostics (UNSUPPORTED_CC, VERSION_MISMATCH, OLD_CUDA_DRIVER, ...).
    TensorRT's bindings have no such call (checked against them): (None, why) there.
    """
    from trtfarm.toolchain.engine import engine_validity

    validity = engine_validity(trt, data)
    if validity is None:
        return None, "no header-only validity check in this runtime"
    why = "; ".join(" ".join(line.split()) for line in validity.diagnostics + validity.log)
    return validity.status != "INVALID", f"get_engine_validity: {validity.status}" + (f" ({why})" if why else "")


def load_plan(ref: str | Path, *, expected_onnx_digest: str | None = None, expected_model: str | None = None,
              installed: Mapping[str, str | None] | None = None, gpus: GpuScan | None = None, trust=None,
              channel: str = "stable", report: bool = False, store=None, accepted=None):
    """Check the plan against its manifest, this host and the fleet's trusted keys, then deserialise it.

    ``expected_model``: the model this server asked for (a manifest of another model is ``UntrustedPlan``).
    ``trust`` (``TrustedKeys``) overrides the configured keys (``TRTFARM_TRUSTED_KEYS``, else gpu_targets.yaml).
    Without trusted keys a plan loads unsigned-checked, except a version-compatible one. Where the runtime has a
    header-only validity check (TensorRT-RTX), a plan it calls INVALID is refused before deserialising. Returns the
    engine. ``channel``: the release channel this host serves; a plan whose signed release (beside it) is of
    another is ``UntrustedPlan`` (a candidate host serves stable too: a model without promotion: has no candidate).
    ``store`` (a ``Store`` or its URI, where the plan was pulled from) with ``accepted`` (this host's
    ``AcceptedReleases``): a signed release older than the one this host accepted there is refused (``rollback``).
    ``report``: record a load receipt in ``store`` for the channel's plan (ok with the deserialisation time, or
    failed with the runtime's refusal, ``RuntimeRefused``; a refusal before the runtime is this host's and writes
    none), never raising when it cannot be written (a warning says why).
    """
    from trtfarm.layout import CHANNEL_ROOTS

    if channel not in CHANNEL_ROOTS:
        raise UserInputError(f"channel {channel!r} is not a channel; use {' or '.join(CHANNEL_ROOTS)}")
    if report and store is None:
        raise UserInputError("load_plan(report=True) needs store=: the store (or its URI) the plan was pulled from")
    files = find_files(Path(ref))
    trust = trust or configured_trust()
    remembered = _memory(store, accepted) if trust is not None else None
    try:
        engine, load_ms = _checked_load(files, trust, channel, remembered, expected_onnx_digest=expected_onnx_digest,
                                        expected_model=expected_model, installed=installed, gpus=gpus)
    except RuntimeRefused as refused:  # evidence against the plan: a failed receipt (it may roll stable back)
        if report:
            record_load(store, files.manifest, channel, error="; ".join(refused.differences), gpus=gpus)
        raise
    except PlanMismatch as refused:  # this host's own mismatch or copy: no receipt, so no rollback for the fleet
        if report:
            warnings.warn("load receipt not recorded: this host refused the plan before the runtime saw it ("
                          f"{refused.differences[0]}); fix the host or pull again", stacklevel=2)
        raise
    if report:
        record_load(store, files.manifest, channel, load_ms=load_ms, gpus=gpus)
    return engine


def _memory(store, accepted):
    """``remembered(track)``: what this host accepted from ``store`` (None without a store or a memory)."""
    if store is None or accepted is None:
        return None
    uri = open_by(store).uri
    return lambda track: accepted.get(uri, track)


def _checked_load(files: PlanFiles, trust, channel: str, remembered, **expected) -> tuple[object, float]:
    """The engine and its deserialisation time (ms), after every check; ``PlanMismatch`` (or ``UntrustedPlan``)."""
    plan, m = files.plan, files.manifest
    checks = static_checks(plan, m, files=files, trust=trust, channel=channel, remembered=remembered, **expected)
    bad = [c.detail for c in checks if c.ok is False]
    if any(c.name in ("signature", "identity") and c.ok is False for c in checks):
        raise UntrustedPlan(plan, bad)
    if bad:
        raise PlanMismatch(plan, bad)
    from trtfarm.toolchain import import_flavour
    from trtfarm.toolchain.engine import EngineRejected, deserialize_plan

    trt, data = import_flavour(m.target.flavour), plan.read_bytes()
    valid, verdict = validity_verdict(trt, data)
    if valid is False:
        raise RuntimeRefused(plan, [f"the {m.target.flavour} runtime's header check refused it, so it was not "
                                  f"deserialised: {verdict}"])
    started = time.perf_counter()
    try:
        engine = deserialize_plan(trt, data, allow_host_code=m.target.version_compatible)
    except EngineRejected as err:
        raise RuntimeRefused(plan, [f"the {m.target.flavour} runtime refused it: {err}"]) from err
    return engine, (time.perf_counter() - started) * 1000


def runtime_check(plan: Path, m: Manifest) -> VerifyCheck:
    """Ask the runtime itself: its header-only validity check first (TensorRT-RTX), then deserialisation.

    A plan the validity check calls INVALID is not deserialised.
    """
    from trtfarm.toolchain import import_flavour
    from trtfarm.toolchain.engine import EngineRejected, deserialize_plan

    trt = import_flavour(m.target.flavour)
    data = plan.read_bytes()
    valid, verdict = validity_verdict(trt, data)
    if valid is False:
        return VerifyCheck("runtime", False, f"{verdict}; not deserialised")
    said = f"{verdict}; " if valid else ""  # a runtime without the check says nothing about it here
    try:
        engine = deserialize_plan(trt, data, allow_host_code=m.target.version_compatible)
    except EngineRejected as err:
        return VerifyCheck("runtime", False, f"{said}deserialize_cuda_engine refused it: {err}")
    return VerifyCheck("runtime", True, f"{said}deserialised: {engine.num_optimization_profiles} profile(s), "
                       f"{engine.num_io_tensors} I/O tensors")


def contexts_that_fit(free_bytes: int, memory_per_profile: list[int], shares: list[float] | None = None,
                      reserve_fraction: float = 0.1) -> list[int]:
    """Execution contexts per profile that fit in ``free_bytes`` (a share kept in reserve).

    One context per profile first; the rest of the budget goes to profiles in proportion to their traffic share.
    """
    budget = int(free_bytes * (1 - reserve_fraction))
    if sum(memory_per_profile) > budget:
        raise UserInputError(f"one context per profile needs {sum(memory_per_profile):,} bytes; only {budget:,} "
                             "are available: use fewer or narrower profiles, or a larger GPU")
    shares = shares or [1 / len(memory_per_profile)] * len(memory_per_profile)
    counts = [1] * len(memory_per_profile)
    budget -= sum(memory_per_profile)
    for i, (mem, share) in enumerate(zip(memory_per_profile, shares, strict=True)):
        counts[i] += int(budget * share // max(mem, 1))
    return counts
