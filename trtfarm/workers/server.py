"""Wait for the farm's Prefect server before talking to it (no Prefect import: a health probe over HTTP).

``prefect server start`` takes ~50 s to answer on a small machine, so a command run right after it would fail on a
refused connection. Commands that need the server probe ``GET <api>/health`` until it answers, for a bounded time,
saying that they wait, and then fail in one line naming the server and the fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from trtfarm.errors import InfrastructureError, first_line


class ServerUnavailable(InfrastructureError):
    """The Prefect server did not answer within the time allowed: a service that is not there (exit 3)."""

    service = "the Prefect server"
    exit_code = 3


class ServerFailed(InfrastructureError):
    """The Prefect server answered but failed or refused a request (exit 1; retrying may help)."""

    service = "the Prefect server"


def server_failure(api_url: str, doing: str, err: Exception) -> InfrastructureError:
    """The one translation of a Prefect client's failure: no answer is ``ServerUnavailable``, else ``ServerFailed``."""
    first = first_line(err)
    if isinstance(err, (httpx.TransportError, OSError)):  # no answer: connection refused or dropped, a timeout
        return ServerUnavailable(f"the Prefect server at {api_url} did not answer to {doing}: "
                                 f"{type(err).__name__}: {first}")
    return ServerFailed(f"the Prefect server at {api_url} failed to {doing}: {type(err).__name__}: {first}")


def _probe(api_url: str) -> str | None:
    """None when the server answers its health check; else why not."""
    try:
        resp = httpx.get(f"{api_url.rstrip('/')}/health", timeout=3)
    except httpx.HTTPError as err:
        return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return None if resp.status_code == 200 else f"HTTP {resp.status_code}"


def wait_for_server(api_url: str, timeout_s: float, say: Callable[[str], None], interval_s: float = 1.0) -> float:
    """Return the seconds waited once ``api_url`` answers; ``ServerUnavailable`` after ``timeout_s``.

    ``say`` gets one line when the wait starts and one every 15 s while it lasts.
    """
    start = time.monotonic()
    why = _probe(api_url)
    if why is None:
        return 0.0
    say(f"waiting up to {timeout_s:g} s for the Prefect server at {api_url} ({why}) ...")
    next_note = start + 15
    while time.monotonic() - start < timeout_s:
        time.sleep(min(interval_s, max(0.0, timeout_s - (time.monotonic() - start))))
        why = _probe(api_url)
        if why is None:
            return time.monotonic() - start
        if time.monotonic() >= next_note:
            say(f"still waiting for {api_url} ({time.monotonic() - start:.0f} s: {why})")
            next_note += 15
    raise ServerUnavailable(f"the Prefect server at {api_url} did not answer within {timeout_s:g} s ({why}); start it "
                            "(`prefect server start`, or the compose stack in infra/) or wait longer with "
                            "--server-wait SECONDS")
