"""A published build's outcome, and the release pointer's move when the target's policy allows.

``outcome_from_manifest`` says what a target whose manifest exists is (up to date, or just built);
``release_if_allowed`` moves its release pointer (a build that just published, or ``trtfarm.executor`` carrying
out a release decision of planning's triage, ``planning/triage.py``) and says what happened, as a value.
"""

from __future__ import annotations

from trtfarm.layout import short_ref
from trtfarm.publishing.release import (
    ReleaseRefused,
    pointer_key,
    read_pointer,
    repair_pointer,
    who,
)
from trtfarm.releases.moves import release_manifest
from trtfarm.releases.rules import RELEASABLE, Stay
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.plan_gate import PlanGate, held_fix, plan_gate
from trtfarm.vocabulary.pointer import SeenPointer
from trtfarm.vocabulary.target_outcome import ReleaseOutcome, Status, TargetOutcome
from trtfarm.vocabulary.targets import TargetWork


def outcome_from_manifest(store: Store, plan: TargetWork, manifest: Manifest, status: Status = "up-to-date",
                          reason: str | None = None) -> TargetOutcome:
    """A target whose manifest exists: up to date, or just built (failed when a verification failed)."""
    failed = [f"{k}: {c.detail}" for k, c in manifest.verification if c.status == "failed"]
    if failed:
        status, reason = "failed", f"published for diagnosis, not released: {'; '.join(failed)}"
    elif reason is None:
        reason = f"build {plan.build_digest[:12]} already published"
    return TargetOutcome(plan.target.id, status, reason, store.url(plan.manifest_key), manifest.build.wall_s,
                         manifest.plan.bytes, {k: v.status for k, v in manifest.verification},
                         manifest_key=plan.manifest_key, published=manifest, build_digest=plan.build_digest)


def release_if_allowed(store: Store, manifest_key: str, manifest: Manifest, release_on: str,
                       run_id: str | None, trial: str | None = None, seen: SeenPointer | None = None,
                       signer=None, promotion=None, override: bool = False) -> ReleaseOutcome:
    """Move the release pointer when the target's policy allows (and the build is no trial); what happened, as a value.

    A plan whose precision gate is not passed is held by the rules (``rules.decide``): published as a trial, the
    pointer kept, the outcome naming the gate and the fix; ``override`` (``--release``) releases it anyway, recorded
    as ``forced`` by who ran the build.

    A damaged pointer (not JSON, fields missing) is trtfarm's own object: it is repaired first, and the outcome
    says so (``repaired``). ``seen``: the pointer as planning read it (its ETag starts the compare-and-swap; a stale
    one conflicts and the pointer is read afresh), else it is read. ``signer`` (the worker's key) signs the release
    claim, and the repair of a damaged pointer; only a process without a key writes an unsigned one (``trtfarm
    sign`` signs it later). ``promotion`` (the model's farm.yaml block): the release goes to the candidate channel,
    whose pointer carries the policy; without it, to stable (the candidate channel follows stable).
    """
    channel = "candidate" if promotion else "stable"
    key = pointer_key(manifest, channel)
    repaired = ""
    if seen is None or seen.key != key:
        repaired = repair_pointer(store, key, release_on, signer) or ""
        before, etag = read_pointer(store, key)
        seen = SeenPointer(key=key, pointer=before, etag=etag)
    before = seen.pointer
    old = short_ref(before.manifest) if before else "nothing"
    if trial:
        return ReleaseOutcome("kept", key, old, why=trial, repaired=repaired, channel=channel, held_by=trial)
    if before and before.manifest == manifest_key:
        return ReleaseOutcome("already", key, old, old, repaired=repaired, channel=channel)
    built = f"built by run {run_id}" if run_id else "built by trtfarm"
    gate = plan_gate(manifest)
    past = override and gate.verdict not in RELEASABLE  # an override: who asked for it, and why
    try:
        done = release_manifest(store, manifest_key, manifest, release_on=release_on, by=who() if past else "trtfarm",
                                reason=f"{built}; released anyway with --release" if past else built, seen=seen,
                                signer=signer, vouched=True, channel=channel, promotion=promotion,
                                override=override)  # the manifest this run published or read
    except (ReleaseRefused, SignatureRefused) as refused:  # a tampered pointer is left for a person to look at
        return ReleaseOutcome("refused", key, old, why=str(refused), repaired=repaired, channel=channel)
    if isinstance(done.decision, Stay) and done.decision.kind == "held":  # nothing unjudged is released: a trial
        return ReleaseOutcome("kept", key, old, why=held_text(gate), repaired=repaired, channel=channel,
                              held_by=f"precision gate {gate.verdict}", fix=held_fix(manifest_key))
    moved = done.after
    if len(moved.history) > 1:  # where it moved from, also when a concurrent writer moved it since planning
        old = short_ref(moved.history[-2].manifest)
    return ReleaseOutcome("moved", key, old, short_ref(manifest_key), repaired=repaired, channel=channel)


def held_text(gate: PlanGate) -> str:
    """Why a plan stays a trial: ``published as a trial: fp16 gate not judged (output 'y' is ...)``."""
    return f"published as a trial: {gate.text()}"
