"""Recording each model's state in the store (``state/<model>.json``): the one writer of state records.

Kept apart from the views' entry points (``views.py``) so that a local build records its model without importing
the what-if: the model's own listings, its next export and its cells (``state/status.py``), then one
compare-and-swap.
"""

from __future__ import annotations

from trtfarm.signing.keys import TrustedKeys
from trtfarm.state.expected import expected_exports
from trtfarm.state.status import model_state
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import Store
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets


def record_states(store: Store, fleet: Fleet, models: list[str] | None = None, *, by: str,
                  targets: list[ResolvedTarget] | None = None, signer=None,
                  trust: TrustedKeys | None = None) -> list[str]:
    """Compute each model's state from the store's records and record it there (``state/<model>.json``).

    The one writer of state records, with two callers: the executor's end (``pipeline.record_changed_states``, for
    a local run and, as a task, for a farm run: the models it changed) and ``trtfarm status --record`` (every model).
    ``models``: those (default: every model in the store); ``targets``: the fleet's every target (a record is of
    the whole fleet), where the caller resolved them already (a run, once); ``trust``: the fleet's trusted keys,
    each release verified with them; ``signer``: signs each record. Returns the models recorded; a record another
    writer replaced meanwhile is left to it. The records written are then put in the index a cold view reads
    (``state/record_index.py``; on S3).
    """
    from trtfarm.state.record import write_state

    names = models if models is not None else StoreSurvey(store, None).models()
    targets = targets if targets is not None else select_targets(fleet, None)
    written: dict[str, bytes] = {}
    for model in names:
        survey = StoreSurvey(store, None, runs=True, model=model, keep_parsed=True)  # releases judged as read
        expected = expected_exports(survey, [model])
        state = model_state(survey, model, expected[model], fleet, by, targets, trust) if model in expected else None
        data = write_state(store, state, signer) if state is not None else None
        if data is not None:
            written[model] = data
    if store.md5_versions:  # each shard of the index touched once, after the records (a file store keeps none)
        from trtfarm.state.record_index import index_records

        index_records(store, written)
    return list(written)
