"""Planning's triage: each target of a run is finished (skipped, up to date) or still to build; read only.

``triage`` splits a run's targets into finished outcomes and the plans still to build, reading the store and
writing nothing. A target is up to date when its manifest exists and its plan object still has the size the
manifest records (a full re-hash is ``trtfarm verify --store``). A published manifest whose release pointer was
never written (a run killed between the two) gets a release decision, which ``trtfarm.executor`` carries out
(``building/release_move.py``: ``release_if_allowed``) when the target's policy allows, so a rerun completes the
release. ``triage_listed``, a farm run's first stage, asks the store's read model instead (``state/run_view.py``: the
target's cell released, naming this build) and triages in full only what that does not settle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from trtfarm.building.release_move import outcome_from_manifest
from trtfarm.errors import CorruptObject
from trtfarm.machine.capabilities import Capabilities
from trtfarm.project.buildable import serve_gap
from trtfarm.publishing.publish import plan_intact, plan_rehash, read_manifest
from trtfarm.publishing.release import seen_pointer
from trtfarm.store import Store
from trtfarm.vocabulary.decisions import Release, Withdraw
from trtfarm.vocabulary.pointer import SeenPointer
from trtfarm.vocabulary.target_outcome import TargetOutcome
from trtfarm.vocabulary.targets import TargetWork

if TYPE_CHECKING:  # (a local build triages in full: it never makes one)
    from trtfarm.state.run_view import RunView


@dataclass
class Triage:
    """What planning found for a run's targets: finished outcomes, plans still to build, and decisions.

    The decisions are about published targets, and ``trtfarm.executor`` carries them out: a release to complete,
    a damaged plan to withdraw.
    """

    done: dict[str, TargetOutcome] = field(default_factory=dict)
    todo: list[TargetWork] = field(default_factory=list)
    releases: list[Release] = field(default_factory=list)
    withdrawals: list[Withdraw] = field(default_factory=list)

    def add(self, other: Triage) -> None:
        """Take ``other``'s findings into this one."""
        self.done.update(other.done)
        self.todo += other.todo
        self.releases += other.releases
        self.withdrawals += other.withdrawals


def triage(store: Store, plans: Sequence[TargetWork], force: bool = False, verify: bool = False,
           trial: str | None = None) -> Triage:
    """Split a run into finished outcomes (skipped, up to date) and the plans that still need a build; read only.

    ``force`` rebuilds published targets too (their manifests are kept: see ``build_group``). A damaged plan object
    (its size, or with ``verify`` its sha256) or a damaged manifest of this very build is rebuilt, and withdrawn
    first (a ``Withdraw`` decision); a published target is released when policy allows (a ``Release`` decision;
    a ``trial`` carries why no pointer moves). Each plan still to build carries its release pointer as read here
    (with its ETag) and whether its manifest was absent, so the build does not read them again.
    """
    found = Triage()
    for p in plans:
        if p.skip_reason:
            found.done[p.target.id] = TargetOutcome(p.target.id, "skipped", p.skip_reason,
                                                    build_digest=p.build_digest, fix=p.skip_fix)
            continue
        p = replace(p, pointer=p.pointer or seen_pointer(store, p.release_key))  # the build's release starts here
        try:
            existing = None if force or p.manifest_absent else read_manifest(store, p.manifest_key)
        except CorruptObject as damaged:  # a damaged manifest of this very build: the rebuild publishes afresh
            found.withdrawals.append(Withdraw(p.target.id, p.prefix, f"its manifest is damaged: {damaged}"))
            existing = None
        damage = plan_intact(store, existing) if existing is not None else None
        if existing is not None and damage is None and verify:
            damage = plan_rehash(store, existing)
            if damage:  # bytes that no longer hash to the manifest: the rebuild publishes afresh
                found.withdrawals.append(Withdraw(p.target.id, p.prefix, damage))
        if existing is None or damage:
            found.todo.append(replace(p, manifest_absent=existing is None and not force))
            continue
        outcome = outcome_from_manifest(store, p, existing)
        if outcome.status != "failed":
            found.releases.append(Release(p.target.id, p.manifest_key, existing, p.target.release_on, p.pointer,
                                          trial, p.promotion))
        found.done[p.target.id] = outcome
    return found


def skip_unservable(plans: Sequence[TargetWork], caps: Capabilities) -> tuple[dict[str, TargetOutcome],
                                                                               list[TargetWork]]:
    """Of the plans still to build, the targets this machine cannot build are skipped (the reason says why).

    Asked after ``triage``: a target already published is up to date here without importing its toolchain.
    """
    done, todo = {}, []
    for p in plans:
        if (gap := serve_gap(p.target, caps)) is not None:
            done[p.target.id] = TargetOutcome(p.target.id, "skipped", gap.reason, fix=gap.fix)
        else:
            todo.append(p)
    return done, todo


def triage_listed(store: Store, plans: Sequence[TargetWork], view: RunView) -> Triage:
    """``triage`` at the floor for runs over many models: the store's read model instead of a read per target.

    A target is up to date when the listings show its manifest, a non-empty plan object and its release pointer,
    and its cell (``RunView.released``: from the model's current state record, else computed once per model) is
    released and names this build. A target the listings show unpublished is built (nothing is read); any other is
    triaged in full (its manifest and pointer read): a release a killed run left undone, a damaged manifest or plan
    object, a pointer serving hosts refuse.
    """
    found = Triage()
    for p in plans:
        t = p.target
        if p.skip_reason:
            found.done[t.id] = TargetOutcome(t.id, "skipped", p.skip_reason, build_digest=p.build_digest,
                                             fix=p.skip_fix)
            continue
        size, pointed = view.plan_bytes(p.manifest_key), view.pointer_listed(p.manifest_key, p.release_key)
        if size is None:
            unreleased = None if pointed else SeenPointer(key=p.release_key, pointer=None, etag=None)
            # what the listings said travels with the plan: neither is read again
            found.todo.append(replace(p, manifest_absent=not view.manifest_listed(p.manifest_key), pointer=unreleased))
        elif not pointed:  # listed as absent: the release swaps it in from nothing
            found.add(triage(store, [replace(p, pointer=SeenPointer(key=p.release_key, pointer=None, etag=None))]))
        elif view.released(t.id, p.manifest_key):
            found.done[t.id] = TargetOutcome(t.id, "up-to-date", f"build {p.build_digest[:12]} already published",
                                             store.url(p.manifest_key), plan_bytes=size,
                                             manifest_key=p.manifest_key, build_digest=p.build_digest)
        else:  # published, yet its cell is not this build released: what is wrong is read and decided
            found.add(triage(store, [p]))
    return found
