"""A release event that cannot be sent: about a second, one trtfarm line on stderr, none of Prefect's warnings.

``trtfarm receipt --failed`` sends ``trtfarm.release.rolled-back`` where ``PREFECT_API_URL`` is set; a server that is
down, silent, or no Prefect API at all must not hold the serving host's command for Prefect's reconnection attempts.
(The event reaching a real server is tests/flows/test_promote.py's.)
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flows.events import release_event

EVENT = "trtfarm.release.rolled-back"
PAYLOAD = {"error": "CUDA error 700 on load", "host": "serving-1", "to": None}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server():
    """A port that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/api"


class _HealthOnly(BaseHTTPRequestHandler):
    """Answers ``/api/health`` like a Prefect server; everything else, the events socket included, is a 404."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/api/health" else 404)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args):
        pass


@pytest.fixture
def health_only_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HealthOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api"
    finally:
        server.shutdown()
        server.server_close()


def _send(monkeypatch, url: str) -> tuple[bool, float]:
    monkeypatch.setenv("PREFECT_API_URL", url)
    start = time.monotonic()
    sent = release_event(EVENT, "encoder/rtx-4090/tensorrt_rtx-1.7.1.116", PAYLOAD)
    return sent, time.monotonic() - start


def _one_line(capfd) -> str:
    out, err = capfd.readouterr()
    assert out == "", out
    lines = err.splitlines()
    assert len(lines) == 1, err  # no Prefect warning, no "Service 'EventsWorker' failed", no traceback
    assert "Traceback" not in err and "Unable to connect" not in err and "EventsWorker" not in err, err
    return lines[0]


def test_an_event_to_a_server_that_is_down_is_given_up_at_once_in_one_line(monkeypatch, capfd):
    url = f"http://127.0.0.1:{_free_port()}/api"
    sent, took = _send(monkeypatch, url)
    assert sent is False and took < 2.5, took  # Prefect's own retries took 8-10 s
    line = _one_line(capfd)
    assert line.startswith(f"trtfarm: the Prefect event {EVENT} was not sent (server at {url} not reachable"), line
    assert line.endswith("the store's history records the move"), line


def test_an_event_to_a_server_that_never_answers_waits_one_probe(monkeypatch, capfd, silent_server):
    sent, took = _send(monkeypatch, silent_server)
    assert sent is False and took < 2.5, took
    assert "did not answer within 1 s" in _one_line(capfd)


def test_an_event_to_an_api_without_an_events_socket_is_not_sent_and_prefect_stays_quiet(
        monkeypatch, capfd, health_only_server):
    import prefect.events.clients  # noqa: F401 - the import is not the call's cost

    sent, took = _send(monkeypatch, health_only_server)
    assert sent is False and took < 2.5, took
    line = _one_line(capfd)
    assert f"(server at {health_only_server} refused the events socket: " in line and "404" in line, line


def test_no_prefect_api_no_event_and_no_words(monkeypatch, capfd):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert release_event(EVENT, "encoder/rtx-4090/tensorrt_rtx-1.7.1.116", PAYLOAD) is False
    assert capfd.readouterr() == ("", "")
