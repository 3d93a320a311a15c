"""Prefect events that automations page on: a stable release rolled back, or blocked, by a failed load receipt.

Emitted only where a Prefect API is configured (``PREFECT_API_URL``): a serving host's ``trtfarm receipt`` without
a farm records the receipt and prints the move; the store's history is the record either way.
"""

from __future__ import annotations

import os


def release_event(event: str, identity: str, payload: dict) -> bool:
    """Emit ``event`` about the release ``identity`` (``model/gpu/toolchain``); False when no Prefect API is set."""
    if not os.environ.get("PREFECT_API_URL"):
        return False
    from prefect.events import emit_event
    from prefect.events.worker import EventsWorker

    emit_event(event=event, resource={"prefect.resource.id": f"trtfarm.release.{identity}"}, payload=payload)
    EventsWorker.drain_all(timeout=30)  # sent before a short command exits, not left in its queue
    return True
