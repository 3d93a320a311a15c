"""Farm commands wait for the Prefect server (bounded, saying so) and fail in one line when it is not there."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from .conftest import REPO

TRTFARM = [sys.executable, "-m", "trtfarm"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {**env, "PREFECT_HOME": str(tmp_path / "prefect-home"), **extra}


@pytest.mark.parametrize("args", [["pools", "sync"], ["farm", "run", "encoder"], ["worker", "--pool", "rtx-4090"]])
def test_without_a_server_the_command_waits_then_fails_in_one_line(tmp_path, args):
    api = f"http://127.0.0.1:{_closed_port()}/api"
    start = time.monotonic()
    done = subprocess.run([*TRTFARM, *args, "--server-wait", "3"], env=_env(tmp_path, PREFECT_API_URL=api), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - start >= 3
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"waiting up to 3 s for the Prefect server at {api}")
    assert lines[-1].startswith(f"error: the Prefect server at {api} did not answer within 3 s") and \
        "--server-wait" in lines[-1] and len(lines) == 2 and "Traceback" not in done.stderr


def test_without_a_configured_server_the_command_says_how_to_name_one(tmp_path):
    done = subprocess.run([*TRTFARM, "farm", "run", "encoder"], env=_env(tmp_path), cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: PREFECT_API_URL is not set")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.integration
def test_pools_sync_right_after_prefect_server_start_waits_for_it_and_succeeds(tmp_path, fleet_file):
    from .farm_server import Postgres

    port, db = _closed_port(), Postgres()  # the farm's database: never SQLite
    env = _env(tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{port}/api", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_UI_ENABLED="false", PREFECT_API_DATABASE_CONNECTION_URL=db.url)
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        done = subprocess.run([*TRTFARM, "pools", "sync", "--targets-file", str(fleet_file), "--json",
                               "--server-wait", "240"], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        db.stop()
    assert done.returncode == 0, done.stderr + (tmp_path / "server.log").read_text()[-2000:]
    assert "waiting up to 240 s for the Prefect server" in done.stderr
    assert "rtx-4090" in done.stdout and "Traceback" not in done.stderr


@pytest.fixture
def failing_server():
    """An HTTP server whose health check answers and whose every API call fails with 500."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            ok = self.path.rstrip("/").endswith("/health")
            body = b"true" if ok else b'{"detail": "database is locked"}'
            self.send_response(200 if ok else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()


def test_a_server_that_fails_the_pool_sync_is_an_infrastructure_failure_naming_it(tmp_path, failing_server):
    env = _env(tmp_path, PREFECT_API_URL=failing_server, PREFECT_CLIENT_MAX_RETRIES="0")
    done = subprocess.run([*TRTFARM, "pools", "sync", "--server-wait", "3"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr  # the server failed: not the user's input (2), not absent (3)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"error: the Prefect server at {failing_server} failed to sync the work pools"), lines
