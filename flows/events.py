"""Prefect events that automations page on: a stable release rolled back, or blocked, by a failed load receipt.

Emitted only where a Prefect API is configured (``PREFECT_API_URL``): a serving host's ``trtfarm receipt`` without
a farm records the receipt and prints the move; the store's history is the record either way. An event that cannot
be sent costs the command about a second, never Prefect's retries: the API's ``/health`` is asked first (``PROBE_S``),
the event goes out on one websocket connection without reconnection attempts (``SEND_S``), Prefect's own warnings
are silenced for the call, and one line on stderr says the event was not sent and why.
"""

from __future__ import annotations

import asyncio
import os
import sys

PROBE_S = 1.0  # how long the API's /health may take to answer before the event is given up
SEND_S = 1.5  # how long connecting to the events socket and sending may take
QUIET = ("prefect.events.clients", "prefect._internal.version_checking")  # what warns of a server it cannot reach


def release_event(event: str, identity: str, payload: dict) -> bool:
    """Emit ``event`` about the release ``identity`` (``model/gpu/toolchain``); True when the server took it.

    False when no Prefect API is set, or when it was not sent: then one line on stderr says why.
    """
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return False
    why = _unreachable(url) or _send(event, identity, payload, url)
    if why:
        print(f"trtfarm: the Prefect event {event} was not sent ({why}); the store's history records the move",
              file=sys.stderr)
    return why is None


def _unreachable(url: str) -> str | None:
    """Why the API at ``url`` cannot take an event now (no answer to ``GET /health`` within ``PROBE_S``), or None."""
    import httpx

    try:
        answer = httpx.get(f"{url.rstrip('/')}/health", timeout=PROBE_S)
    except httpx.TimeoutException:
        return f"server at {_shown(url)} did not answer within {PROBE_S:g} s"
    except httpx.HTTPError as e:
        return f"server at {_shown(url)} not reachable: {_first_line(e)}"
    if not answer.is_success and answer.status_code not in (401, 403):  # the events socket authenticates itself
        return f"server at {_shown(url)} answered GET /health with HTTP {answer.status_code}: not a Prefect API"
    return None


def _send(event: str, identity: str, payload: dict, url: str) -> str | None:
    """Send the event on one connection to the events socket within ``SEND_S``; why it was not sent, or None."""
    from prefect.events import Event
    from prefect.events.clients import get_events_client
    from prefect.logging.loggers import disable_logger
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def once() -> None:
        async with get_events_client(reconnection_attempts=0) as client:
            await client.emit(Event(event=event, resource={"prefect.resource.id": f"trtfarm.release.{identity}"},
                                    payload=payload))

    try:
        with temporary_settings({PREFECT_API_URL: url}), disable_logger(QUIET[0]), disable_logger(QUIET[1]):
            asyncio.run(asyncio.wait_for(once(), SEND_S))
    except asyncio.TimeoutError:
        return f"server at {_shown(url)} did not take it within {SEND_S:g} s"
    except Exception as e:  # the events client raises what its websocket library raises
        return f"server at {_shown(url)} refused the events socket: {_first_line(e)}"
    return None


def _first_line(e: Exception) -> str:
    """An exception in a few words: its message's first line, else its kind."""
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def _shown(url: str) -> str:
    """The API URL as a message shows it: without credentials."""
    import httpx

    return str(httpx.URL(url).copy_with(userinfo=b""))
