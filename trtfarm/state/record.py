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
import re
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from trtfarm.errors import CorruptObject
from trtfarm.layout import state_key
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.fleetview import TargetStatus
from trtfarm.vocabulary.manifest import validation_problems

STATE_FORMAT = 2  # 2: each cell kept as the view's own cell (``TargetStatus``), its candidate channel beside it


_S3_ETAG = re.compile(r'"[0-9a-f]{32}(-[0-9]+)?"')  # an S3 ETag: the content's MD5, or "MD5 of parts-count"


def in_parts(version: str | None) -> bool:
    """Whether a listed version is the ETag of an S3 object put or copied in parts (a copy may change it)."""
    return bool(version) and bool(_S3_ETAG.fullmatch(version)) and "-" in version


def single_part_md5(version: str | None) -> str | None:
    """The MD5 of the bytes a listed version names, where it is the ETag of an S3 object put in one request."""
    return version[1:-1] if version and _S3_ETAG.fullmatch(version) and "-" not in version else None


class KeptCell(BaseModel):
    """One target's cell as a record keeps it: the cell itself, and what the record knows of it besides.

    ``cell`` is the view's own type (``vocabulary/fleetview.TargetStatus``), serialised as it is, its candidate
    channel's columns included (``age_s`` left out: a view counts it by its own clock). A record never says a release
    is ``signed`` (only a reader's trusted keys can): one that does is not a record this trtfarm wrote.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    cell: TargetStatus
    target_print: str  # state/status.py ``target_print``
    # where the writer trusted keys (RecordedState.trusted_keys): what a host trusting them would say of the release
    verified: Literal["signed", "refused"] | None = None
    verified_reason: str = ""
    keys: list[str] = []  # the hints of the keys that signed the release claim and the plan (signed)
    expires_at: str | None = None  # when the signed release claim expires (signed)
    manifest_version: str | None = None  # the listed versions of the manifest and plan objects the cell names
    plan_version: str | None = None
    # its candidate's verdict may change with time alone (a soak in progress): a view computes the cell anew
    timed: bool = False

    @property
    def state(self) -> str:
        """The cell's state."""
        return self.cell.state

    @property
    def manifest(self) -> str | None:
        """The manifest the cell names."""
        return self.cell.manifest

    @model_validator(mode="after")
    def _never_signed(self) -> KeptCell:
        if self.cell.signed == "signed" or self.cell.age_s is not None:
            raise ValueError("a recorded cell says neither signed nor an age")
        return self


class RecordedRelease(BaseModel):
    """What one channel pointer of the model referenced when the state was computed (``ReleaseRef``'s fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    manifest: str | None = None  # the manifest it names (None: the pointer could not be read)
    refusal: str | None = None  # why serving hosts without trusted keys refuse it (None: they take it)


class RecordedState(BaseModel):
    """``state/<model>.json``: the state of a model's targets and what it was computed from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    format: Literal[2] = STATE_FORMAT
    model: str
    inputs: str  # StoreSurvey.model_inputs when it was computed
    shape: str | None = None  # the same by size (``stamp='size'``): equal in a copy that kept no versions
    written_at: str
    by: str
    store: str | None = None  # the store it was written in (its URI): a copy's records name the original
    expected: dict  # the export the model's next build starts from (state/expected.py ExpectedExport's fields)
    cells: dict[str, KeptCell]  # target id -> its cell
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


def recorded_state_from_json(data: bytes, where: str) -> RecordedState | None:
    """Parse a stored state record; ``CorruptObject`` naming ``where`` when it is not one.

    None for a record of an older format (an older trtfarm wrote it): nothing is wrong with it, it just says less, so
    the view computes the model's state as for a model without one, and the next run records it in this format.
    """
    try:
        return RecordedState.model_validate_json(data)
    except ValidationError as err:
        if _older_format(data):
            return None
        raise CorruptObject(f"{where}: not a recorded state ({validation_problems(err)}); `trtfarm status --record` "
                            "writes it again from the store's records") from err


def _older_format(data: bytes) -> bool:
    """Whether ``data`` is a JSON object whose ``format`` is an integer older than ``STATE_FORMAT``."""
    try:
        found = json.loads(data).get("format")
    except (ValueError, AttributeError):
        return False
    return isinstance(found, int) and not isinstance(found, bool) and 0 < found < STATE_FORMAT


def write_state(store: Store, state: RecordedState, signer=None) -> bytes | None:
    """Replace the model's state record by ``state`` (compare-and-swap): the bytes written, None if another won.

    ``signer`` signs it (``signing/state_claim.py``). The loser's state is not lost: the winner's was computed from
    the store too, and a view that finds it older than the store recomputes it.
    """
    key = state_key(state.model)
    doc = state.model_dump(mode="json")
    if signer is not None:
        from trtfarm.signing.state_claim import sign_state

        doc["signature"] = sign_state(signer, key, doc)
    data = json.dumps(doc, separators=(",", ":")).encode()
    blob = store.get(key)
    try:
        store.compare_and_swap(key, data, blob.etag if blob else None)
    except Conflict:
        return None
    return data


def now_iso() -> str:
    """The time a state record is written."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
