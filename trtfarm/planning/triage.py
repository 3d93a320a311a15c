"""Planning's triage: each target of a run is finished (skipped, up to date) or still to build; read only.

``triage`` splits a run's targets into finished outcomes and the plans still to build, reading the store and
writing nothing. A target is up to date when its manifest exists and its plan object still has the size the
manifest records (a full re-hash is ``trtfarm verify --store``). A published manifest whose release pointer was
never written (a run killed between the two) gets a release decision, which ``trtfarm.executor`` carries out
(``building/release_move.py``: ``release_if_allowed``) when the target's policy allows, so a rerun completes the
release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from trtfarm import layout
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


class StoreIndex:
    """What a run over many models needs to know of the store, from two paginated listings.

    Plan objects with their sizes, and release pointers. Built once per run (thread-safe reads after construction).
    """

    def __init__(self, store: Store) -> None:
        self.sizes = dict(store.list_sizes(layout.plans_prefix()))
        self.pointers = set(store.list(layout.releases_prefix()))


def triage_listed(store: Store, plans: Sequence[TargetWork], index: StoreIndex | None = None) -> Triage:
    """``triage`` at the floor for runs over many models: listings instead of a manifest read per target.

    A target is up to date when its manifest and a non-empty plan object are listed (its manifest is not read). A
    target without a release pointer gets the full treatment (its manifest read, a release decided if policy
    allows), so a killed run's release still completes. ``index``: the run's listings; without it, this model's
    are listed.
    """
    found = Triage()
    if not plans:
        return found
    model, onnx12 = layout.parse_plan_key(plans[0].manifest_key)[:2]
    if index is not None:
        sizes, pointers = index.sizes, index.pointers
    else:
        sizes = dict(store.list_sizes(f"{layout.plans_prefix(model)}{onnx12}/"))
        pointers = set(store.list(layout.releases_prefix(model)))
    for p in plans:
        t = p.target
        if p.skip_reason:
            found.done[t.id] = TargetOutcome(t.id, "skipped", p.skip_reason, build_digest=p.build_digest,
                                             fix=p.skip_fix)
        elif p.manifest_key not in sizes or not sizes.get(layout.plan_key(p.prefix)):
            unreleased = SeenPointer(key=p.release_key, pointer=None, etag=None) if p.release_key not in pointers \
                else None  # what the listings said travels with the plan: neither is read again
            found.todo.append(replace(p, manifest_absent=p.manifest_key not in sizes, pointer=unreleased))
        elif p.release_key not in pointers:  # listed as absent: the release swaps it in from nothing
            found.add(triage(store, [replace(p, pointer=SeenPointer(key=p.release_key, pointer=None, etag=None))]))
        else:
            found.done[t.id] = TargetOutcome(t.id, "up-to-date", f"build {p.build_digest[:12]} already published",
                                             store.url(p.manifest_key), plan_bytes=sizes[layout.plan_key(p.prefix)],
                                             manifest_key=p.manifest_key, build_digest=p.build_digest)
    return found
