"""A real farm on 127.0.0.1 for integration tests: ``prefect server start``, pools, deployments, worker processes.

Everything is started as a subprocess in its own process group and stopped by PID (a worker does not always exit on
one SIGTERM, so stop escalates to SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRTFARM = [sys.executable, "-m", "trtfarm"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    """One Prefect server (SQLite under ``home``) and the worker processes started against it.

    The server serves no UI unless ``ui=True`` (then at ``self.url``: V2 under ``/v2/``, V1 at the root).
    """

    def __init__(self, home: Path, env: dict[str, str], ui: bool = False) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/api"
        self.env = {**os.environ, **env, "PREFECT_HOME": str(home / "prefect"), "PREFECT_API_URL": self.api,
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "true" if ui else "false",
                    "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "5",
                    # a worker that dies is seen offline (and its pool NOT_READY) within seconds, not minutes
                    "PREFECT_WORKER_HEARTBEAT_SECONDS": "2", "PREFECT_SERVER_SERVICES_FOREMAN_LOOP_SECONDS": "2",
                    "PREFECT_LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, env={**self.env, **(env or {})}, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def start_server(self, timeout: float = 120) -> None:
        self.spawn("server", [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                              "--port", str(self.port)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.api}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"prefect server did not start:\n{self.log('server')[-3000:]}")

    def run(self, argv: list[str], check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def trtfarm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run([*TRTFARM, *args], check=check)

    def trtfarm_json(self, *args: str):
        return json.loads(self.trtfarm(*args, "--json").stdout)

    def wait_http(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"{url} did not answer")

    def deploy(self, *names: str) -> None:
        argv = [sys.executable, "-m", "prefect", "--no-prompt", "deploy"]
        for n in names:
            argv += ["--name", n]
        self.run(argv)

    def start_worker(self, pool: str) -> subprocess.Popen:
        return self.spawn(f"worker-{pool}", [*TRTFARM, "worker", "--pool", pool, "--name", f"test-{pool}"])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def processes_of_flow_run(flow_run_id: str) -> list[int]:
    """PIDs of the processes a worker started for ``flow_run_id`` (found by the id in their environment)."""
    pids = []
    needle = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
