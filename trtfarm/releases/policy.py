"""The promotion policy in force: farm.yaml's ``promotion:`` block as the model's newest registered export has it.

A candidate pointer carries the policy it was built under; an operator who edits farm.yaml and registers the export
again (``trtfarm models push``) changes the policy for the candidate already waiting. Promotion and a failed
receipt's rollback read the policy in force, and say when it differs from the candidate's. A model built only from
local files (nothing registered) has the candidate's own policy in force.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from trtfarm.layout import export_file_key, export_prefix, exports_prefix, parse_export_record_key
from trtfarm.store import Store
from trtfarm.vocabulary.buildspec import SPEC_NAME
from trtfarm.vocabulary.promotion import Promotion


@dataclass(frozen=True)
class PolicyInForce:
    """The policy that applies now, where it comes from, and how it differs from the candidate's ("": it does not)."""

    policy: Promotion | None
    source: str
    differs: str = ""


def _registered(store: Store, model: str) -> tuple[str, Promotion | None] | None:
    """The newest registered export's id and its promotion block.

    None when there is no registered export or no readable farm.yaml in it.
    """
    ids = sorted(p[1] for k in store.list(exports_prefix(model)) if (p := parse_export_record_key(k)))
    if not ids:
        return None
    blob = store.get(export_file_key(export_prefix(model, ids[-1]), SPEC_NAME))
    try:
        doc = yaml.safe_load(blob.data) if blob else None
        block = doc.get("promotion") if isinstance(doc, dict) else None
        return ids[-1], Promotion.model_validate(block) if block is not None else None
    except (yaml.YAMLError, ValidationError):
        return None


def _changes(old: Promotion, new: Promotion) -> str:
    return ", ".join(f"{k} {getattr(old, k)} -> {getattr(new, k)}" for k in Promotion.model_fields
                     if getattr(old, k) != getattr(new, k))


def policy_in_force(store: Store, model: str, frozen: Promotion | None) -> PolicyInForce:
    """The policy in force for ``model``'s candidate, which was built under ``frozen``."""
    found = _registered(store, model)
    if found is None or found[1] is None:  # nothing registered, or its farm.yaml declares no block: the candidate's
        return PolicyInForce(frozen, "the candidate's own policy")
    export_id, now = found
    differs = _changes(frozen, now) if frozen is not None and frozen != now else ""
    return PolicyInForce(now, f"farm.yaml of export {export_id}", differs)
