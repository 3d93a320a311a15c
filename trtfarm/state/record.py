"""The recorded state of a model's targets, kept in the store (``state/<model>.json``) for views on any host.

The executor writes it when a run settles a model (and ``trtfarm status --record`` for every model): what
``state/status.py`` computed from the store's records, with the digest of every object it was computed from
(``StoreSurvey.model_inputs``, from the listings alone). A view lists the store, and for a model whose listed objects
still have that digest it reads this one object instead of the model's pointers, manifests and run outcomes; for any
other it says the record is older than the store and computes the state from the records themselves. The records
stay the truth: a missing, damaged or outdated state record only costs reads, never changes an answer.

Written the way pointers are: create-only the first time, compare-and-swap after, so two writers never interleave.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from trtfarm.errors import CorruptObject
from trtfarm.layout import state_key
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.fleetview import State
from trtfarm.vocabulary.manifest import validation_problems

STATE_FORMAT = 1


class RecordedCell(BaseModel):
    """One target's state as it was computed, and the digest of the target's part of it (settings, policy)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    target_print: str  # state/status.py ``target_print``
    target: str
    state: State
    reason: str = ""
    released_at: str | None = None
    precision: str | None = None
    engine: str | None = None
    signed: Literal["unverified", "unsigned", "refused"] | None = None  # never "signed": records are not signed
    since: str | None = None
    manifest: str | None = None
    export: str | None = None
    # where the writer trusted keys (RecordedState.trusted_keys): what a host trusting them would say of the release
    verified: Literal["signed", "refused"] | None = None
    verified_reason: str = ""
    keys: list[str] = []  # the hints of the keys that signed the release claim and the plan (signed)
    expires_at: str | None = None  # when the signed release claim expires (signed)
    manifest_version: str | None = None  # the listed versions of the manifest and plan objects the cell names
    plan_version: str | None = None


class RecordedRelease(BaseModel):
    """What one channel pointer of the model referenced when the state was computed (``ReleaseRef``'s fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    manifest: str | None = None  # the manifest it names (None: the pointer could not be read)
    refusal: str | None = None  # why serving hosts without trusted keys refuse it (None: they take it)


class RecordedState(BaseModel):
    """``state/<model>.json``: the state of a model's targets and what it was computed from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    format: Literal[1] = STATE_FORMAT
    model: str
    inputs: str  # StoreSurvey.model_inputs when it was computed
    written_at: str
    by: str
    expected: dict  # the export the model's next build starts from (state/expected.py ExpectedExport's fields)
    cells: dict[str, RecordedCell]  # target id -> its cell
    problems: list[str] = []  # damaged objects of the model, named on every view
    trusted_keys: list[str] | None = None  # the hints of the keys the writer verified releases with (None: none)
    # every channel pointer of the model (its key -> what it references), whatever the fleet; None: a record written
    # before they were recorded, which says nothing of them
    releases: dict[str, RecordedRelease] | None = None
    # the digest of the fleet's serving images its releases were checked against (state/served.py serving_print;
    # None: not said): under other images a view checks each release again
    serving: str | None = None
    signature: dict | None = None  # the record signed by the run's key (signing/state_claim.py), or None
    # what the what-ifs read of the manifests the cells were computed from (each target's build now, each released
    # one): manifest key -> [its listed version, its ManifestSummary (state/summaries.py) as a row]
    manifests: dict[str, tuple[str, list]] = {}
    # the fields of those rows, in order ('@': a key of summary_values); a reader of another layout reads the
    # manifests instead
    summary_layout: str | None = None
    summary_values: dict = {}  # the values the rows share (a target's settings, a model's profiles), by shared_ref


def recorded_state_from_json(data: bytes, where: str) -> RecordedState:
    """Parse a stored state record; ``CorruptObject`` naming ``where`` when it is not one."""
    try:
        return RecordedState.model_validate_json(data)
    except ValidationError as err:
        raise CorruptObject(f"{where}: not a recorded state ({validation_problems(err)}); `trtfarm status --record` "
                            "writes it again from the store's records") from err


def write_state(store: Store, state: RecordedState, signer=None) -> bool:
    """Replace the model's state record by ``state`` (compare-and-swap); False when another writer won the race.

    ``signer`` signs it (``signing/state_claim.py``). The loser's state is not lost: the winner's was computed from
    the store too, and a view that finds it older than the store recomputes it.
    """
    key = state_key(state.model)
    doc = state.model_dump(mode="json")
    if signer is not None:
        from trtfarm.signing.state_claim import sign_state

        doc["signature"] = sign_state(signer, key, doc)
    blob = store.get(key)
    try:
        store.compare_and_swap(key, json.dumps(doc, separators=(",", ":")).encode(), blob.etag if blob else None)
    except Conflict:
        return False
    return True


def now_iso() -> str:
    """The time a state record is written."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
