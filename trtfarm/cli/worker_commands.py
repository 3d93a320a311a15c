"""``trtfarm worker``: a GPU machine checked against its pool's targets, then a Prefect worker started on it.

The Prefect worker runs as this process's child (``workers/supervise.py``), so that a termination notice reaches
the builds; the admission check is ``workers/admission.py``'s.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import typer

from trtfarm.cli.common import (
    JSON_OPT,
    SERVER_WAIT_OPT,
    TARGETS_OPT,
    app,
    err,
    fail,
    message_text,
    need_server,
    out,
    print_json,
    project_root,
    targets_path,
)


@app.command()
def worker(pool: str = typer.Option(..., "--pool", help="the work pool to serve (one per GPU model)"),
           queue: str = typer.Option(None, "--queue", help="serve only this toolchain's queue of the pool, e.g. "
                                     "tensorrt-11.4.0.106 (a worker image carries one TensorRT version)"),
           check_only: bool = typer.Option(False, "--check-only", help="check this machine against POOL, then exit"),
           name: str = typer.Option(None, "--name", help="worker name"),
           healthcheck: bool = typer.Option(False, "--healthcheck", help="serve Prefect's worker health endpoint "
                                            "(http://127.0.0.1:8080/health) for container health checks"),
           cold_start: bool = typer.Option(False, "--cold-start", help="start each run in a fresh interpreter, "
                                           "as Prefect does, not forked from this worker's warm one"),
           poll_only: bool = typer.Option(False, "--poll-only", help="take runs on the worker's poll alone, as "
                                          "Prefect does, not also when the server announces one in the pool"),
           targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT, server_wait: int = SERVER_WAIT_OPT) -> None:
    """Check the local GPU and toolchains against POOL's targets; only then start a Prefect worker on it."""
    from trtfarm.machine.capabilities import local_capabilities
    from trtfarm.project.fleet_file import load_fleet, signing_settings
    from trtfarm.workers.admission import check_worker
    from trtfarm.workers.built_by import NAME_ENV, POOL_ENV

    fleet_path = targets_path(targets_file)
    caps = local_capabilities()
    result = check_worker(load_fleet(fleet_path), pool, caps.gpus, caps.versions, queue)
    signing_settings(fleet_path, only="key").signer()  # a configured key must load, now
    if as_json:
        print_json({"pool": pool, "queue": queue, "ok": result.ok, "found": result.found, "needs": result.needs,
                    "targets": result.targets, "problems": result.problems})
    else:
        out.print(message_text(f"pool {pool}: needs {result.needs}\nthis machine: {result.found}"), highlight=False)
    if not result.ok:
        raise fail("refusing to serve pool {!r}:\n  - {}".format(pool, "\n  - ".join(result.problems)), code=3)
    if check_only:
        return
    need_server(server_wait)
    # Prefect's `prefect worker start`; its process worker also takes a run when the server announces one in the
    # pool (flows/listening_worker.py), unless --poll-only
    argv = [sys.executable, "-m", "prefect" if poll_only else "flows.listening_worker", "worker", "start",
            "--pool", pool, "--type", "process", "--no-create-pool-if-not-found", *(["--name", name] if name else []),
            *(["--work-queue", queue] if queue else []),
            *(["--with-healthcheck"] if healthcheck else [])]
    # prefect.yaml's runs start `python -m trtfarm.workers.run_engine` (docs/dispatch.md): `python` must be this
    # one, with Prefect and trtfarm installed
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PREFECT_WORKER_QUERY_SECONDS": os.environ.get("PREFECT_WORKER_QUERY_SECONDS", "1"),
           "TRTFARM_HOME": str(project_root()), "PATH": path,
           "TRTFARM_TARGETS": str(Path(fleet_path).resolve()) if Path(fleet_path).is_file() else fleet_path,
           POOL_ENV: pool, NAME_ENV: name or os.environ.get(NAME_ENV) or f"{pool}@{socket.gethostname()}"}
    from trtfarm.workers.run_engine import SOCKET_ENV
    from trtfarm.workers.supervise import supervise

    # each run's command (prefect.yaml: `python -m trtfarm.workers.run_engine`) forks its engine from a warm
    # interpreter beside the worker (flows/warm_engine.py), through a socket in a folder only this user opens
    folder = tempfile.mkdtemp(prefix="trtfarm-warm-")
    beside = None
    if len(os.path.join(folder, "engine.sock")) > 100:  # a Unix socket's path holds 107 bytes
        err.print(message_text(f"{folder} is too long a path for the warm interpreter's socket: each run starts in "
                               "a fresh interpreter (set TMPDIR to a shorter folder)"), highlight=False)
        cold_start = True
    if cold_start:
        env.pop(SOCKET_ENV, None)
    else:
        env[SOCKET_ENV] = os.path.join(folder, "engine.sock")
        beside = [sys.executable, "-m", "flows.warm_engine", "--socket", env[SOCKET_ENV]]
    # the Prefect worker runs as this process's child, so that a termination notice (SIGTERM) reaches the builds
    try:
        code = supervise(argv, env, lambda line: err.print(message_text(line), highlight=False, soft_wrap=True),
                         beside=beside)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    raise typer.Exit(code)
