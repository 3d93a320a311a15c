"""The fleet a store's plans were built for, recorded in the store, so every host tells the same story.

Each run records the fleet it built for (``fleets/<digest>.json``, content-addressed, and ``fleets/current.json``
naming the newest). A view on a host without a fleet file (no ``--targets-file``, ``$TRTFARM_TARGETS`` or
``./gpu_targets.yaml``) reads the store's recorded fleet instead of guessing from the host's own GPUs; a fleet file
given still wins. The record leaves out the fleet's ``signing:`` block: which keys a host trusts never comes from
the store, whose writers it is meant to check.
"""

from __future__ import annotations

import hashlib
import json
import socket
from dataclasses import dataclass
from datetime import datetime, timezone

from pydantic import ValidationError

from trtfarm.identity import canonical_json
from trtfarm.layout_shared import fleet_key, fleet_pointer_key
from trtfarm.store import Conflict
from trtfarm.vocabulary.fleet import Fleet


@dataclass(frozen=True)
class RecordedFleet:
    """A fleet read from the store, with where it came from (for the one line a view prints)."""

    fleet: Fleet
    digest: str
    recorded: str
    host: str
    source: str

    def note(self) -> str:
        """``no gpu_targets.yaml here: using the fleet the store recorded (...)``: what a view says once."""
        return (f"no gpu_targets.yaml here: using the fleet the store recorded ({len(self.fleet.targets)} targets, "
                f"fleet {self.digest[:12]}, from {self.source} on {self.host}, {self.recorded}); --targets-file or "
                "$TRTFARM_TARGETS wins")


def fleet_document(fleet: Fleet) -> tuple[bytes, str]:
    """The fleet as canonical JSON without its signing block, and that document's sha256."""
    data = canonical_json(fleet.model_dump(mode="json", exclude={"signing"}))
    return data, hashlib.sha256(data).hexdigest()


def record_fleet(store, fleet: Fleet, source: str) -> str:
    """Record ``fleet`` (read from ``source``) as the store's current one; return its digest.

    The fleet document is written once (create-only); the pointer only when it names another fleet, by
    compare-and-swap: of two runs that race, the one that writes last is current, and neither write is torn.
    """
    data, digest = fleet_document(fleet)
    store.put_if_absent(fleet_key(digest), data)
    pointer = {"fleet": digest, "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "host": socket.gethostname(), "source": source}
    for _ in range(3):
        current = store.get(fleet_pointer_key())
        if current is not None and _pointer(current.data).get("fleet") == digest:
            return digest
        try:
            store.compare_and_swap(fleet_pointer_key(), canonical_json(pointer), current.etag if current else None)
            return digest
        except Conflict:
            continue
    return digest


def recorded_fleet(store) -> RecordedFleet | None:
    """The store's current fleet, or None when no run recorded one (or the record cannot be read as a fleet)."""
    current = store.get(fleet_pointer_key())
    pointer = _pointer(current.data) if current is not None else {}
    digest = pointer.get("fleet")
    if not isinstance(digest, str) or len(digest) != 64:
        return None
    doc = store.get(fleet_key(digest))
    if doc is None or hashlib.sha256(doc.data).hexdigest() != digest:
        return None  # missing or not what its name says: no record, the host's own fleet stands
    try:
        fleet = Fleet.model_validate(json.loads(doc.data))
    except (ValueError, ValidationError):
        return None
    return RecordedFleet(fleet, digest, str(pointer.get("recorded", "?")), str(pointer.get("host", "?")),
                         str(pointer.get("source", "?")))


def _pointer(data: bytes) -> dict:
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
