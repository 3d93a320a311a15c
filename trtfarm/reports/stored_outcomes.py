"""Which outcomes a report shows: those a run stored, or a model's newest plan per target."""

from __future__ import annotations

import json

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.publishing.catalog import manifests_in
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.target_outcome import TargetOutcome


def run_outcomes(store: Store, run: str) -> dict[str, list[TargetOutcome]]:
    """The outcomes a run stored, per model (``reports/<model>/<run>/outcomes.json``); empty for an unknown run."""
    found = {}
    for key in store.list(layout.reports_prefix()):
        parsed = layout.parse_report_key(key)
        if parsed and parsed[1:] == (run, "outcomes.json"):
            found[parsed[0]] = [TargetOutcome.from_record(r, store.uri) for r in json.loads(store.get(key).data)]
    return found


def outcomes_for(store: Store, ref: str) -> tuple[str, str, list[TargetOutcome]]:
    """(model, run, outcomes) for a stored run id, or for a model: its newest plan per target."""
    for model, outcomes in run_outcomes(store, ref).items():
        return model, ref, outcomes
    newest: dict[str, tuple[str, str, Manifest]] = {}
    for key, url, m in manifests_in(store, ref):
        current = newest.get(m.target.target_id)
        if current is None or (m.model.exported_at or "", m.created_at) > (current[2].model.exported_at or "",
                                                                            current[2].created_at):
            newest[m.target.target_id] = (key, url, m)
    if not newest:
        from trtfarm.nearest import nearest_and_known
        from trtfarm.publishing.catalog import store_models

        raise UserInputError(f"no run or model {ref!r} in {store.uri}; "
                             f"{nearest_and_known(ref, store_models(store, releases=False), 'models with plans')}")
    return ref, "latest", [TargetOutcome(t, "built", "", url, manifest_key=key, published=m)
                           for t, (key, url, m) in sorted(newest.items())]
