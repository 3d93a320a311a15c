"""A real farm on 127.0.0.1 for integration tests: Postgres, ``prefect server start``, pools, deployments, workers.

The Prefect server runs on PostgreSQL (a private cluster from ``infra/local-farm/postgres.sh``), never on SQLite: SQLite
locks under concurrent run creation ("database is locked", served as 503s). Everything else is started as a subprocess
in its own process group and stopped by PID (a worker does not always exit on one SIGTERM, so stop escalates to
SIGKILL); the cluster is stopped by its script, which waits until none of its processes is left.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from . import forkcli

REPO = Path(__file__).resolve().parents[1]
TRTFARM = [sys.executable, "-m", "trtfarm"]
POSTGRES_SH = REPO / "infra" / "local-farm" / "postgres.sh"


def flush_prefect_services(timeout: float = 60) -> None:
    """Send what this process's Prefect services still hold (events, logs) while the server is up, then stop them.

    A flow run in the test process leaves events queued; were the server stopped first, Prefect's drain at
    interpreter exit would wait for them for ever and the suite would never exit.
    """
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout, at_exit=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sh(command: str, folder: Path, *args: str) -> str:
    done = subprocess.run(["bash", str(POSTGRES_SH), command, str(folder), *args], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"postgres.sh {command} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def migrated_seed() -> Path | None:
    """A stopped cluster whose ``prefect`` database Prefect has migrated, made once per machine (temp dir); None
    before PostgreSQL is installed (the first cluster installs it).

    Its key is this Prefect's version, postgres.sh and the PostgreSQL install: a new one of any of them makes a new
    seed. A fresh database costs a Prefect server ~10-20 s of migrations and a cluster its initdb; a copy of the seed
    costs neither. The copies do not sync to disk (``fsync = off``): a test cluster is deleted, never recovered, and
    its stop no longer waits on the disk.
    """
    import fcntl
    import glob
    import hashlib

    import prefect

    installs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not installs:
        return None
    key = hashlib.sha256("|".join([prefect.__version__, POSTGRES_SH.read_text(), *installs]).encode()).hexdigest()
    seed = Path(tempfile.gettempdir()) / f"trtfarm-pg-seed-{key[:12]}"
    with open(f"{seed}.lock", "w") as lock:  # one maker at a time, across the suite's workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (seed / "data" / "PG_VERSION").exists():
            made = Path(tempfile.mkdtemp(prefix=f"{seed.name}-"))
            try:
                url = _sh("start", made, "--db", "prefect")
                subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], check=True,
                               env={**os.environ, "PREFECT_API_DATABASE_CONNECTION_URL": url,
                                    "PREFECT_HOME": str(made / "prefect")}, capture_output=True, timeout=900)
                _sh("stop", made)
                shutil.rmtree(made / "prefect")
                with open(made / "data" / "postgresql.conf", "a") as conf:
                    conf.write("fsync = off\nfull_page_writes = off\n")
                for log in ("postgres.log", "initdb.log", "port"):  # each copy picks a free port of its own
                    (made / log).unlink(missing_ok=True)
                os.rename(made, seed)
            finally:
                if made.exists():
                    with contextlib.suppress(RuntimeError):
                        _sh("stop", made)
                    shutil.rmtree(made, ignore_errors=True)
    return seed


class Postgres:
    """A private PostgreSQL cluster on 127.0.0.1 (``infra/local-farm/postgres.sh``), with a ``prefect`` database.

    Its folder is a fresh one under the temp dir, not under a caller's home: as root the cluster runs as the
    ``postgres`` user, which cannot enter pytest's or ``TemporaryDirectory``'s private (0700) folders. It starts as a
    copy of ``migrated_seed()``. ``stop`` stops the cluster (also at interpreter exit, if nobody did) and removes the
    folder.
    """

    def __init__(self) -> None:
        seed = migrated_seed()
        self.dir = Path(tempfile.mkdtemp(prefix="trtfarm-pg-"))
        atexit.register(self.stop)
        if seed is not None:  # owners and modes kept: the cluster's user must own its data
            subprocess.run(["cp", "-a", f"{seed}/.", str(self.dir)], check=True)
        self.url = self._sh("start", "--db", "prefect")

    def _sh(self, command: str, *args: str) -> str:
        return _sh(command, self.dir, *args)

    def database(self, name: str) -> str:
        """The URL of a new (or existing) database ``name`` in this cluster."""
        return self._sh("createdb", name)

    def log(self) -> str:
        path = self.dir / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, keep_log: Path | None = None) -> None:
        """Stop the cluster and remove its folder (its server log first copied to ``keep_log``)."""
        if self.dir.exists():
            try:
                self._sh("stop")
            finally:
                if keep_log is not None and keep_log.parent.is_dir():
                    keep_log.write_text(self.log())
                shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.stop)


class Farm:
    """One Prefect server on Postgres and the worker processes started against it.

    ``database`` is the server's ``PREFECT_API_DATABASE_CONNECTION_URL`` (``postgresql+asyncpg://...``); without it,
    ``start_server`` starts a private cluster for this farm and ``stop`` stops it (its log is kept as
    ``home/postgres.log``). The server serves no UI unless ``ui=True`` (then at ``self.url``: V2 under ``/v2/``, V1
    at the root). ``server`` (``http://HOST:PORT``) is a Prefect server already running (a farm shared by several
    benches): ``start_server`` then only waits for it to answer, and ``stop`` stops only what this farm started.
    """

    def __init__(self, home: Path, env: dict[str, str], ui: bool = False, database: str | None = None,
                 address: str = "127.0.0.1", server: str | None = None) -> None:
        self.home = home
        self.database = database
        self.postgres: Postgres | None = None
        self.address = address  # where the server listens: a HostNetwork's address for workers on hosts
        self.shared = server is not None
        self.port = int(server.rsplit(":", 1)[1]) if server else free_port()
        self.url = server.rstrip("/") if server else f"http://{address}:{self.port}"
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

    def spawn_on(self, host, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``argv`` on a worker ``host`` (tests/hosts.py): a process of that machine, reaching the farm over
        its link only."""
        proc = host.spawn(argv, env={**self.env, **(env or {})}, log=self.home / f"{name}.log", cwd=REPO)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def start_server(self, timeout: float = 300) -> None:
        if self.shared:
            self.wait_http(f"{self.api}/health", timeout)
            return
        if self.database is None:
            self.postgres = Postgres()
            self.database = self.postgres.url
        self.spawn("server", [sys.executable, "-m", "prefect", "server", "start", "--host", self.address,
                              "--port", str(self.port)], env={"PREFECT_API_DATABASE_CONNECTION_URL": self.database})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.api}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"prefect server did not start:\n{self.log('server')[-3000:]}")

    def run(self, argv: list[str], check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(argv, env={**self.env, **(env or {})}, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def trtfarm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = forkcli.trtfarm(args, env=self.env, cwd=REPO, timeout=300)
        if check and done.returncode != 0:
            raise AssertionError(f"{args} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

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
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.postgres is not None:  # after the server: it holds connections until it exits
            self.postgres.stop(keep_log=self.home / "postgres.log")
            self.postgres = None


@contextlib.contextmanager
def farm_client(farm: Farm):
    """A sync Prefect client of ``farm``'s server, with the API URL set for the block."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: farm.api}), get_client(sync_client=True) as c:
        yield c


def started_runs(client) -> set[str]:
    """The ids of the flow runs someone started: the nightly schedule's own runs, which Prefect's scheduler service
    creates ahead of time whenever its loop comes round (under load, in the middle of a test), are left out."""
    return {str(r.id) for r in client.read_flow_runs() if not r.auto_scheduled}


def wait_for(predicate, timeout: float, what):
    """``predicate()``'s first true value within ``timeout`` s; ``what`` (a text, or a callable giving one) names it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := predicate()):
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")


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
