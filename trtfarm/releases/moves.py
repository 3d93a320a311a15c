"""Every move of a channel: read the ledger, ask ``rules.decide``, append its event in one compare-and-swap.

``apply`` is the one loop: it reads the channel's pointer (its ledger), gathers the evidence the request needs (the
failed receipts of each release in the ledger, for a rollback), asks the pure state machine, and writes the event
and the pointer that is the ledger's fold with ``IfMatch`` on the ETag it read. A lost swap reads again and decides
again, so no move is ever decided from a stale read: six hosts reporting one bad plan make one rollback, and the
other five find the channel no longer serves it. Releases, promotions, rollbacks and receipt-triggered rollbacks
all come here; the command line, the flows and the build's release step call these functions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import timedelta

from trtfarm.errors import UserInputError
from trtfarm.layout import short_ref
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.publish import plan_rehash, read_manifest
from trtfarm.publishing.release import (
    ChannelRefused,
    ReleaseRefused,
    _older,
    check_current,
    event_time,
    next_version,
    pointer_key,
    policy_blocker,
    sign_pointer,
    toolchain_label,
    who,
    with_event,
)
from trtfarm.publishing.release_check import asked_channel, manifest_identity_problem, read_pointer
from trtfarm.releases import rules
from trtfarm.releases.ledger import entries
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.release_claim import DEFAULT_EXPIRY
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.plan_gate import plan_gate
from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer, SeenPointer, pointer_from_json


@dataclass(frozen=True)
class Applied:
    """What ``apply`` did: the decision, the pointer before it, and the pointer after (the same when it stayed)."""

    decision: rules.Decision
    before: ReleasePointer | None
    after: ReleasePointer | None

    @property
    def moved(self) -> bool:
        """True when an event was appended."""
        return isinstance(self.decision, rules.Move)


@dataclass(frozen=True)
class Vetted:
    """A manifest a move may name: its key, the manifest, and the sha256 of its bytes (for the signed claim)."""

    key: str
    manifest: Manifest
    sha256: str


def vet(store: Store, manifest_key: str, m: Manifest | None, *, trust=None, signer=None, vouched: bool = False,
        release_on: str = "engine", force: bool = False) -> Vetted:
    """The manifest at ``manifest_key`` checked for a move: its identity, trust, plan bytes and the policy.

    ``vouched``: ``m`` is what the store holds there (the caller wrote or read it), so with neither ``trust`` nor
    ``signer`` it is not read back. ``SignatureRefused`` or ``ReleaseRefused`` say why it may not be released.
    """
    stored = None if vouched and m is not None and trust is None and signer is None else \
        read_stored(store, manifest_key, attestations=trust is not None)
    if stored is None and m is None:
        raise ReleaseRefused(f"not released: no manifest at {store.url(manifest_key)}")
    problem = manifest_identity_problem(manifest_key, stored.manifest if stored else m)
    if problem:
        raise SignatureRefused("other identity", f"not released: {problem}")
    if trust is not None:
        if stored is None:
            raise ReleaseRefused(f"not released: no manifest at {store.url(manifest_key)}")
        stored.verdict(trust).raise_if_refused(f"not released: {store.url(manifest_key)}")
        damaged = plan_rehash(store, stored.manifest)  # what hosts would download, hashed before it is released
        if damaged:
            raise SignatureRefused("other bytes", f"not released: {damaged}")
    m = m if m is not None else stored.manifest  # the caller's copy is what the policy judges
    blocker = None if force else policy_blocker(m, release_on)
    if blocker:
        raise ReleaseRefused(f"not released: {blocker}")
    return Vetted(manifest_key, m, stored.manifest_sha256 if stored else hashlib.sha256(m.to_json()).hexdigest())


def failed_manifests(store: Store, key: str, pointer: ReleasePointer | None) -> rules.Evidence:
    """The evidence a rollback is decided on: which manifests of the ledger are in the store, which reported failed.

    A failed receipt counts only from a host that can serve the plan (``receipts.counts``).
    """
    from trtfarm.layout import parse_channel_key
    from trtfarm.releases.receipts import counting, list_receipts

    if pointer is None:
        return rules.Evidence()
    name = parse_channel_key(key)[0]  # type: ignore[index]  # a pointer was read at a channel key
    present, failed = set(), set()
    for manifest in {e.manifest for e in pointer.history}:
        m = read_manifest(store, manifest)
        if m is None:
            continue
        present.add(manifest)
        if any(not r.ok for r in counting(list_receipts(store, *name, pointer.channel, m.plan.sha256), m)):
            failed.add(manifest)
    return rules.Evidence(frozenset(failed), frozenset(present))


def _event(decision: rules.Move, v: Vetted, seq: int, *, by: str, reason: str, gates=None,
           evidence: list[str] | None = None) -> ReleaseEvent:
    m = v.manifest
    return ReleaseEvent(action=decision.action, manifest=decision.manifest, onnx_digest=m.model.onnx_digest,
                        exported_at=m.model.exported_at, by=by, reason=reason, gates=gates, at=event_time(),
                        seq=seq, evidence=evidence)


def _pointer(current: ReleasePointer | None, v: Vetted, event: ReleaseEvent, channel: str, promotion,
             version: int) -> ReleasePointer:
    m = v.manifest
    return ReleasePointer(channel=channel, promotion=promotion if promotion is not None else
                          (current.promotion if current else None), model=m.model.name, gpu=m.target.gpu,
                          toolchain=toolchain_label(m), manifest=v.key, plan_key=m.plan.key,
                          plan_sha256=m.plan.sha256, onnx_digest=m.model.onnx_digest,
                          build_digest=m.build.build_digest, exported_at=m.model.exported_at,
                          history=with_event(current.history if current else [], event), version=version)


def apply(store: Store, key: str, request: rules.Request, *, reason: str, by: str | None = None,
          given: Vetted | None = None, trust=None, signer=None, accepted=None, expiry: timedelta = DEFAULT_EXPIRY,
          seen: SeenPointer | None = None, promotion=None, gates: dict[str, str] | None = None,
          evidence: list[str] | None = None, max_attempts: int = 20) -> Applied:
    """Decide ``request`` on the channel at ``key`` and append its event (compare-and-swap; a lost swap decides again).

    ``given``: the vetted manifest a release or promotion names; a rollback's target is read and vetted here (on
    ``built``: a plan that was serving is not held to the engine check again). ``seen``: the pointer as planning
    read it; the first swap names its ETag. ``promotion``: the policy a candidate pointer carries (None keeps it).
    """
    if not reason.strip():
        raise ReleaseRefused("not released: the reason is empty; say why the pointer moves (it goes in its history)")
    force = getattr(request, "force", False)
    for attempt in range(max_attempts):
        current, etag = (seen.pointer, seen.etag) if seen and seen.key == key and not attempt else \
            read_pointer(store, key)
        if not force:
            check_current(store, key, current, trust, accepted)
        asked = request
        if isinstance(request, rules.ReleaseTo) and current is not None and given is not None:
            asked = replace(request, older=_older(given.manifest, current))
        needs = isinstance(request, (rules.Rollback, rules.FailedReceipt))
        seen_evidence = failed_manifests(store, key, current) if needs else rules.Evidence(
            gate=plan_gate(given.manifest).verdict if isinstance(request, rules.ReleaseTo) and given else "passed")
        decision = rules.decide(entries(current), asked, seen_evidence)
        if isinstance(decision, rules.Stay):
            return Applied(decision, current, current)
        v = given if given is not None and given.key == decision.manifest else \
            vet(store, decision.manifest, None, trust=trust, release_on="built")
        version = next_version(store, current, accepted)
        event = _event(decision, v, version, by=by or who(), reason=reason, gates=gates, evidence=evidence)
        pointer, claim = sign_pointer(_pointer(current, v, event, asked_channel(key), promotion, version), v.manifest,
                                      v.sha256, signer, expiry)
        data = pointer.to_json()
        try:
            store.compare_and_swap(key, data, etag)
        except Conflict:
            continue
        if accepted is not None and claim is not None:
            accepted.remember(store.uri, claim)
        after = pointer_from_json(data)  # as a reader gets it (schema 2: no seq)
        if needs and decision.action == "rollback":
            after = _failed_meanwhile(store, key, after, decision.manifest, seen_evidence, reason=reason,
                                      signer=signer, trust=trust) or after
        return Applied(decision, current, after)
    raise ReleaseRefused(f"{key}: {max_attempts} concurrent writers in a row; try again")


def _failed_meanwhile(store: Store, key: str, after: ReleasePointer, target: str, seen: rules.Evidence, *,
                      reason: str, signer, trust) -> ReleasePointer | None:
    """A rollback's target reported failed by a receipt its decision did not see: that receipt's rollback, now.

    A receipt is written, then decided; a rollback is decided from the receipts it read, then written. A receipt
    written between the two decided against the plan served before (stale) and its rollback could land on the plan
    it names; reading the evidence again after the write closes that gap (one of the two always sees the other).
    """
    if target in seen.failed or target not in failed_manifests(store, key, after).failed:
        return None
    done = apply(store, key, rules.FailedReceipt(target, after.channel, "rollback"), signer=signer, trust=trust,
                 reason=f"{reason}; then its target was reported failed", by="trtfarm receipt")
    return done.after if done.moved else None


def release_manifest(store: Store, manifest_key: str, m: Manifest, *, release_on: str = "engine", reason: str,
                     by: str | None = None, rollback: bool = False, force: bool = False, override: bool = False,
                     trust=None, seen: SeenPointer | None = None, signer=None, accepted=None,
                     expiry: timedelta = DEFAULT_EXPIRY, vouched: bool = False, channel: str = "stable",
                     promotion=None) -> Applied:
    """Release ``manifest_key`` to ``channel`` (a build's release, or ``trtfarm release``); what ``apply`` did.

    ``ReleaseRefused`` when the policy or the order of exports forbid it (``rollback``: back to an older export on
    purpose; ``force``: an override, recorded as ``forced``). A plan whose precision gate is not passed stays (a
    ``held`` Stay) unless ``override`` (a build's ``--release``) or ``force`` release it anyway: recorded as
    ``forced``, the gate in the event's reason and gates. A plan the channel serves already: unchanged.
    """
    v = vet(store, manifest_key, m, trust=trust, signer=signer, vouched=vouched, release_on=release_on, force=force)
    key = pointer_key(v.manifest, channel)
    gate = plan_gate(v.manifest)
    past = {"accuracy": f"{gate.text()}: released anyway"} if gate.verdict not in rules.RELEASABLE else None
    done = apply(store, key, rules.ReleaseTo(manifest_key, force=force, rollback=rollback, override=override),
                 reason=f"{reason}; {gate.text()}" if past else reason, by=by, given=v, trust=trust, signer=signer,
                 accepted=accepted, expiry=expiry, seen=seen, promotion=promotion, gates=past)
    if isinstance(done.decision, rules.Stay) and done.decision.kind == "older":
        raise ReleaseRefused(
            f"not released: {key} points at an export from {done.before.exported_at}; this plan's export is older "
            f"({v.manifest.model.exported_at}). Use `trtfarm release {short_ref(manifest_key)} --rollback --reason "
            "...` to go back on purpose.")
    return done


def move_release(store: Store, manifest_key: str, m: Manifest, *, signer=None, **how) -> ReleasePointer:
    """``release_manifest`` with ``signer`` and ``how`` (its other keywords); the pointer after it.

    ``ReleaseRefused`` also when the plan's precision gate holds the release (``--force`` releases it anyway).
    """
    done = release_manifest(store, manifest_key, m, signer=signer, **how)
    if isinstance(done.decision, rules.Stay) and done.decision.kind == "held":
        raise ReleaseRefused(f"not released: {plan_gate(m).text()}; rebuild with held-out data (--heldout, or "
                             "heldout.npz beside the export), or release it anyway with --force (recorded as forced)")
    return done.after


def promote_manifest(store: Store, candidate: ReleasePointer, gates: dict[str, str], verdict: str, *, reason: str,
                     by: str | None = None, force: bool = False, signer=None, trust=None,
                     candidate_seq: int | None = None) -> Applied:
    """Point ``stable`` at the candidate's manifest when its gates hold (``force``: an override).

    ``ChannelRefused`` when stable already serves it (the loser of two racing promotions).
    """
    m = read_manifest(store, candidate.manifest)
    if m is None:
        raise ReleaseRefused(f"not promoted: the candidate's manifest {candidate.manifest} is not in the store")
    v = vet(store, candidate.manifest, m, trust=trust, signer=signer, release_on="built", force=force)
    key = pointer_key(m, "stable")
    ref = [f"candidate#{candidate_seq}"] if candidate_seq is not None else None
    done = apply(store, key, rules.PromoteTo(candidate.manifest, verdict, force), reason=reason, by=by, given=v,
                 trust=trust, signer=signer, gates=gates, evidence=ref)
    if isinstance(done.decision, rules.Stay) and done.decision.kind == "already":
        e = done.before.current
        raise ChannelRefused(f"not promoted: {key} is already at {candidate.manifest} ({e.action} by {e.by} at "
                             f"{e.at})")
    return done


def rollback(store: Store, key: str, *, reason: str, by: str | None = None, signer=None, trust=None) -> Applied:
    """Move the channel at ``key`` back by the rules (``rules.rollback_target``); ``ChannelRefused`` with none."""
    pointer, _ = read_pointer(store, key)
    if pointer is None:
        raise UserInputError(f"nothing is released at {store.url(key)}: there is nothing to roll back")
    done = apply(store, key, rules.Rollback(), reason=reason, by=by, signer=signer, trust=trust)
    if isinstance(done.decision, rules.Stay):
        now = done.before
        raise ChannelRefused(f"not rolled back: {now.identity} ({now.channel}) has {done.decision.detail}; it stays "
                             f"on {now.manifest}. Release a known good plan with `trtfarm release MANIFEST "
                             "--rollback --reason ...`")
    return done


def move_keys(settings) -> tuple:
    """``(trust, signer)`` for a channel move from the signing settings in force (``project.fleet_file``).

    ``UserInputError`` when serving hosts verify and there is no key to sign the move with: the one refusal
    ``promote``, ``rollback``, ``receipt`` and the promote-candidates flow give.
    """
    trust, signer = settings.trusted_keys(), settings.signer()
    if trust is not None and signer is None:
        raise UserInputError("verification is on, and serving hosts refuse a move no trusted key signed: set "
                             "TRTFARM_SIGNING_KEY (or signing.key in gpu_targets.yaml) to a key whose public half "
                             "is trusted (on the farm: the control worker's)")
    return trust, signer
