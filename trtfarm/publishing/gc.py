"""Retention: the newest N plans per (model, GPU, toolchain), and everything a release pointer references.

Newest means by export time, then build time. What the pointers of both channels reference, and which of them
serving hosts refuse, is the state model's answer (``state/views.release_references``, the same pointer
summaries and serving-host checks ``trtfarm status`` reads): gc reads no pointer itself.

Deletion order keeps readers safe: the manifest goes first (the plan becomes invisible), then its provenance and
signature objects (every one in the plan folder, a publisher's unreachable leftovers too), then the plan. A kept
plan keeps its attestations: gc never looks at keys, so a key rotation changes nothing here.
"""

from __future__ import annotations

import json
import secrets
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from trtfarm.layout import folder_of, gc_prefix, gc_record_key, parse_plan_prefix
from trtfarm.publishing.attest import folder_attestations
from trtfarm.publishing.catalog import manifests_in
from trtfarm.publishing.release import toolchain_label
from trtfarm.publishing.release_check import manifest_identity_problem
from trtfarm.store import Store
from trtfarm.vocabulary.fleetview import ReleaseRef


@dataclass(frozen=True)
class Doomed:
    """A plan that retention removes."""

    manifest_key: str
    plan_key: str
    bytes: int
    why: str
    attestations: tuple[str, ...] = ()  # the provenance and signature objects that go with the plan


def plans_to_delete(store: Store, keep: int, references: Iterable[ReleaseRef],
                    skipped: list[str] | None = None) -> list[Doomed]:
    """What ``trtfarm gc`` would delete, newest kept first, every plan a channel pointer references always kept.

    ``references``: every channel pointer's, from the state model. One serving hosts refuse (it cannot be read, or it
    names another identity's manifest, or a missing or damaged one) is described in ``skipped``, and every plan of
    its (model, GPU, toolchain) is kept: what it references is unknown. So is a plan whose manifest is damaged or
    sits in another identity's folder.
    """
    skipped = [] if skipped is None else skipped
    referenced, unknown = set(), set()
    for ref in references:  # both channels' plans stay
        if ref.manifest:
            referenced.add(ref.manifest)
        if ref.refusal:
            unknown.add(ref.identity)
            skipped.append(f"{ref.refusal.rstrip('.')}; gc keeps every plan of {ref.identity}.")
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
    """Delete manifest, attestations, then plan for each; return bytes freed.

    First each model's deleted folders are recorded (``gc/<model>/...``, create-only), so that a later run or dry run
    that needs one of those builds again says it was deleted, rather than comparing with another build.
    """
    record_deletions(store, doomed)
    freed = 0
    for d in doomed:
        store.delete(d.manifest_key)
        for key in d.attestations:
            store.delete(key)
        store.delete(d.plan_key)
        freed += d.bytes
    return freed


def record_deletions(store: Store, doomed: list[Doomed]) -> None:
    """One record per model of the plan folders ``doomed`` removes: when, and why each."""
    at = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    per: dict[str, dict[str, str]] = defaultdict(dict)
    for d in doomed:
        folder = parse_plan_prefix(folder_of(d.manifest_key))
        if folder is not None:
            per[folder.model][folder_of(d.manifest_key)] = d.why
    for model, folders in per.items():
        doc = {"deleted_at": at, "by": "trtfarm gc", "folders": folders}
        store.put_if_absent(gc_record_key(model, at, secrets.token_hex(4)), json.dumps(doc, sort_keys=True).encode())


def deleted_folders(store: Store) -> dict[str, str]:
    """Every plan folder a ``gc --apply`` deleted -> ``deleted by gc on <day> (<why>)``, from its records."""
    found: dict[str, str] = {}
    for key in store.list(gc_prefix()):
        blob = store.get(key)
        try:
            doc = json.loads(blob.data) if blob is not None else {}
            for folder, why in (doc.get("folders") or {}).items():
                found[str(folder)] = f"deleted by gc on {str(doc.get('deleted_at', '?'))[:8]} ({why})"
        except (ValueError, AttributeError):
            continue  # a record that cannot be read: that build is compared as any other
    return found
