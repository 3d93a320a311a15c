"""Retention: the newest N plans per (model, GPU, toolchain), and everything a release pointer references.

Newest means by export time, then build time.

Deletion order keeps readers safe: the manifest goes first (the plan becomes invisible), then its provenance and
signature objects (every one in the plan folder, a publisher's unreachable leftovers too), then the plan. A kept
plan keeps its attestations: gc never looks at keys, so a key rotation changes nothing here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from trtfarm.errors import CorruptObject
from trtfarm.layout import channel_prefix, folder_of, releases_prefix
from trtfarm.publishing.attest import folder_attestations, read_stored
from trtfarm.publishing.catalog import manifests_in
from trtfarm.publishing.release import read_pointer, toolchain_label
from trtfarm.publishing.release_check import asked_identity, check_identity, manifest_identity_problem
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.store import Store


@dataclass(frozen=True)
class Doomed:
    """A plan that retention removes."""

    manifest_key: str
    plan_key: str
    bytes: int
    why: str
    attestations: tuple[str, ...] = ()  # the provenance and signature objects that go with the plan


def _identity_problem(store: Store, key: str, pointer) -> str | None:
    """Why a pointer does not name one identity with its manifest (a copied or edited pointer), or None."""
    try:
        check_identity(store, key, pointer, read_stored(store, pointer.manifest))
    except (SignatureRefused, CorruptObject) as err:
        return str(err)
    return None


def plans_to_delete(store: Store, keep: int, skipped: list[str] | None = None) -> list[Doomed]:
    """What ``trtfarm gc`` would delete, newest kept first, pointer targets always kept.

    A damaged release pointer or manifest is skipped and described in ``skipped``: every plan of a (model, GPU,
    toolchain) whose pointer is damaged, or names another identity's manifest, is kept (what it references is
    unknown), and so is a plan whose manifest is damaged or sits in another identity's folder.
    """
    skipped = [] if skipped is None else skipped
    referenced, unknown = set(), set()
    keys = [*store.list(releases_prefix()), *store.list(channel_prefix("candidate"))]  # both channels' plans stay
    for key in keys:
        try:
            pointer, _ = read_pointer(store, key)
        except CorruptObject as damaged:
            unknown.add(asked_identity(key))
            skipped.append(f"{damaged} gc keeps every plan of this release.")
            continue
        if pointer:
            referenced.add(pointer.manifest)
            problem = _identity_problem(store, key, pointer)
            if problem:
                unknown.add(asked_identity(key))
                skipped.append(f"{problem}; gc keeps every plan of {asked_identity(key)}.")
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    damaged_manifests: list[str] = []
    for key, _, m in manifests_in(store, problems=damaged_manifests):
        problem = manifest_identity_problem(key, m)
        if problem:
            skipped.append(f"{problem}; gc keeps it.")
            continue
        groups[m.model.name, m.target.gpu, toolchain_label(m)].append((key, m))
    skipped.extend(f"{d} gc keeps it." for d in damaged_manifests)
    doomed = []
    for (model, gpu, tc), items in sorted(groups.items()):
        if f"{model}/{gpu}/{tc}" in unknown:
            continue
        items.sort(key=lambda x: (x[1].model.exported_at or "", x[1].created_at), reverse=True)
        for rank, (key, m) in enumerate(items):
            if rank >= keep and key not in referenced:
                doomed.append(Doomed(key, m.plan.key, m.plan.bytes,
                                     f"{model}/{gpu}/{tc}: #{rank + 1} newest, not released (keeping {keep})",
                                     tuple(folder_attestations(store, folder_of(key)))))
    return doomed


def delete_plans(store: Store, doomed: list[Doomed]) -> int:
    """Delete manifest, attestations, then plan for each; return bytes freed."""
    freed = 0
    for d in doomed:
        store.delete(d.manifest_key)
        for key in d.attestations:
            store.delete(key)
        store.delete(d.plan_key)
        freed += d.bytes
    return freed
