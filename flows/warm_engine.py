"""A farm worker's warm interpreter: Prefect, the flows and the builder imported once, one fork per run.

Prefect's process worker starts a fresh Python for every flow run; importing Prefect, trtfarm and the flow took
1.5-1.7 s of each of the two runs between an export landing and its release, on an idle 2-core host (5-15 s on a
busy one; docs/measurements.md). ``trtfarm worker`` starts this process beside the Prefect worker. It imports what a
run imports, then waits on a Unix socket in a folder only its user can open. Each run's command
(``workers/run_engine.py``) sends its arguments, environment, working folder and standard streams; this process
forks, and the fork becomes that run's ``python -m prefect.engine``: it takes the run's environment (Prefect's
settings, and its logging where that differs, are read again from it), folder, ``sys.path`` and streams, leaves this
process's group, and runs the engine as ``python -m`` would. This process reaps it and sends its wait status back,
which the command exits with.

- Nothing runs stale code: before each fork the file of every loaded module is checked; once one has changed, each
  run gets a fresh interpreter, and once none of this process's forks is running, it starts again (``exec``) and
  imports the new code.
- A run that Python would start otherwise (a ``PYTHON*`` or locale variable, a relative ``PYTHONPATH``) is not
  forked, nor one that comes when a fork fails; its command starts it fresh and says why.
- It forks only while it has one thread (a fork of a process with threads can inherit a held lock): the warm-up
  threads of ``building/warm.py`` are held here and run in each fork instead.
- A warm-up that fails (a broken checkout) is said once; runs then start fresh, and Prefect reports the error as
  it would have, until the code changes.
- Only this user's processes are served (the socket's folder is private, and the peer's uid is checked).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import NamedTuple

from trtfarm.workers.run_engine import COLD, FORKED, REQUEST, STATUS, peer_uid

ENGINE = "prefect.engine"
# the flows prefect.yaml deploys (tests/test_warm_engine.py: the template's entrypoints), and the modules they import
# where used
ENTRYPOINTS = ("flows/build_target.py", "flows/build_matrix.py", "flows/promote.py")
LATER = ("tasks.job", "tasks.build", "tasks.report", "tasks.status")
REQUEST_S = 10.0  # a request is a few kB on a local socket
STARTED_IN = os.getcwd()
LOGGING_VARS = ("PREFECT_LOGGING_", "PREFECT_SERVER_LOGGING_", "PREFECT_INTERNAL_LOGGING_")  # logging.yml reads these
LOGGING_NAMES = ("PREFECT_HOME", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH", "PREFECT_DEBUG_MODE")


class Run(NamedTuple):
    """What a fork runs: the engine module with these arguments (its environment and streams are already set)."""

    module: str
    argv: list[str]


def warm_up(home: Path) -> None:
    """Import what a run imports: Prefect's engine, the deployed flows (as the engine loads them), the builder."""
    from trtfarm.building import warm

    warm.hold()
    importlib.import_module(ENGINE)
    importlib.import_module("prefect.flow_engine")
    from prefect.utilities.importtools import load_script_as_module

    before, path = os.getcwd(), list(sys.path)
    os.chdir(home)
    sys.path.insert(0, str(home))
    try:
        for entry in ENTRYPOINTS:
            if (home / entry).is_file():
                load_script_as_module(str(home / entry))
        for name in LATER:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    finally:  # a fork's sys.path is a fresh interpreter's: neither this one nor Prefect's loader adds to it
        sys.path[:] = path
        os.chdir(before)
    for flavour in warm.installed_flavours():
        with contextlib.suppress(warm.ToolchainUnavailable):
            warm.import_flavour(flavour)
    importlib.import_module("boto3")


def sources() -> dict[str, tuple[int, int]]:
    """(mtime, size) of the file of every loaded module: what a fork would run without reading (5 ms for 1,300)."""
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            try:
                st = os.stat(path)
            except OSError:
                found[path] = (-1, -1)
            else:
                found[path] = (st.st_mtime_ns, st.st_size)
    return found


def changed(seen: dict[str, tuple[int, int]]) -> str | None:
    """The first file of ``seen`` that is not as it was, if any."""
    for path, was in seen.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = (-1, -1)
        if now != was:
            return path
    return None


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, REQUEST.size, 3)
    try:
        while len(data) < REQUEST.size:
            chunk = conn.recv(REQUEST.size - len(data))
            if not chunk:
                raise ValueError("short request")
            data += chunk
        size = REQUEST.unpack(data)[0]
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ValueError("short request")
            body += chunk
        if len(fds) != 3:
            raise ValueError("a request carries the run's three standard streams")
        return json.loads(body), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def startup_differs(env: dict[str, str], cwd: str) -> str | None:
    """Why a fresh interpreter would start otherwise than this one did, if it would.

    A variable Python reads at its start (``PYTHON*``, the locale) that differs, or a relative ``PYTHONPATH`` entry
    read from another folder.
    """
    for name in sorted({*env, *os.environ}):
        read = name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")
        if read and env.get(name) != os.environ.get(name):
            return f"the run's {name} is not the warm interpreter's"
    if cwd != STARTED_IN and not all(map(os.path.isabs, env.get("PYTHONPATH", "/").split(os.pathsep))):
        return "the run's PYTHONPATH names folders relative to its own"
    return None


def logging_differs(env: dict[str, str]) -> bool:
    """Whether Prefect would set logging up otherwise for the run than it did here (0.1 s to do again).

    So it would if a variable its logging settings read differs, or with a logging file of the user's, which may
    read any setting.
    """
    if "PREFECT_LOGGING_SETTINGS_PATH" in env:
        return True
    names = {n for n in {*env, *os.environ} if n.startswith(LOGGING_VARS) or n in LOGGING_NAMES}
    return any(env.get(n) != os.environ.get(n) for n in names)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class Server:
    """The socket, the forks running and whether this process may still fork."""

    def __init__(self, path: str, home: Path, say=print) -> None:
        self.path, self.home, self.say = path, home, say
        self.running: dict[int, socket.socket] = {}
        self.cold: str | None = None  # why runs start fresh now
        self.stale = False  # a loaded module's file changed: start again once no fork runs
        self.seen: dict[str, tuple[int, int]] = {}
        self.base_path = list(sys.path)  # as a fresh interpreter has it; the warm-up's additions are not
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)  # runs that come while it warms wait, then fork
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def warm(self, module: str = ENGINE) -> None:
        """Import what a run imports (or, for tests, ``module``), then note every loaded module's file."""
        try:
            if module == ENGINE:
                warm_up(self.home)
            else:  # tests: an engine of their own
                importlib.import_module(module)
        except BaseException as exc:  # noqa: BLE001 - a broken checkout: Prefect reports it in each fresh run
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.cold = f"its warm-up failed ({type(exc).__name__}: {exc})"
            self.say(f"trtfarm warm engine: {self.cold}; runs start in a fresh interpreter until the code changes")
        self.seen = sources()

    def serve(self) -> Run:
        """Serve until a fork: returns, in the fork, what it runs (the parent never returns)."""
        while True:
            if self.stale and not self.running:
                self.restart()
            ready, _, _ = select.select([self.listener, self.wake_r], [], [])
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    os.read(self.wake_r, 512)
                self.reap()
            if self.listener in ready:
                try:
                    conn, _ = self.listener.accept()
                except OSError as exc:  # too many open files: the run's command waits, or starts fresh
                    self.say(f"trtfarm warm engine: cannot take a run ({exc})")
                    continue
                run = self.take(conn)
                if run is not None:
                    return run

    def take(self, conn: socket.socket) -> Run | None:
        """Read one run's request and fork it, or answer why not; returns, in the fork, what it runs."""
        try:
            if peer_uid(conn) != os.getuid():
                conn.close()
                return None
            conn.settimeout(REQUEST_S)  # a command stopped mid-request holds up no other run
            request, fds = _request(conn)
            conn.settimeout(None)
        except (OSError, ValueError):
            conn.close()
            return None
        if not self.stale and (path := changed(self.seen)):
            self.stale, self.cold = True, f"its code changed since it started ({path})"
            self.say(f"trtfarm warm engine: {self.cold}: it starts again once its runs end")
        why = self.cold or startup_differs(request["env"], request["cwd"]) or (
            "it has more than one thread" if _threads() > 1 else None)
        pid = None
        if why is None:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            try:
                pid = os.fork()
            except OSError as exc:  # a process limit: this run starts fresh, and may fail as it would have
                why = f"it cannot fork ({exc})"
        if pid is None:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(COLD + why.encode()[:400])
            conn.close()
            return None
        if pid == 0:
            return self.become(conn, request, fds)
        for fd in fds:
            os.close(fd)
        self.running[pid] = conn
        with contextlib.suppress(OSError):
            conn.sendall(FORKED)
        return None

    def reap(self) -> None:
        """Send each ended fork's wait status to its command."""
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.running.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(STATUS.pack(status))
                conn.close()

    def become(self, conn: socket.socket, request: dict, fds: list[int]) -> Run:
        """In the fork: this run's process, as ``python -m prefect.engine`` would start it."""
        signal.set_wakeup_fd(-1)
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
        self.listener.close()
        for other in self.running.values():
            other.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)  # signals reach it once, through its command
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        relog = logging_differs(request["env"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[:] = [request["cwd"], *self.base_path[1:]]  # `python -m` puts its folder first
        if "prefect.context" in sys.modules:  # Prefect's settings, again from the run's environment
            sys.modules["prefect.context"].refresh_global_settings_context()
        if relog and "prefect.main" in sys.modules:  # Prefect set logging up at its import: again, for the run
            sys.modules["prefect.logging.configuration"].setup_logging(incremental=False)
        if "trtfarm.building.warm" in sys.modules:
            sys.modules["trtfarm.building.warm"].hold(False)
        threading.Thread(target=_watch, args=(conn,), name="trtfarm-run-engine", daemon=True).start()
        return Run(ENGINE, list(request["argv"]))

    def restart(self) -> None:
        """Start again with the code as it is now (same PID, same socket path)."""
        self.say("trtfarm warm engine: starting again to import the changed code")
        signal.set_wakeup_fd(-1)
        self.listener.close()
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def _watch(conn: socket.socket) -> None:
    """Pass on the signals the run's command gets; if the command is killed, so is this run."""
    while True:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:
            os.kill(os.getpid(), signal.SIGKILL)
        for signum in data:
            os.kill(os.getpid(), signum)


def run(job: Run) -> None:
    """Run the engine module as ``python -m`` runs it; its ``exit()`` ends the process as it would have."""
    sys.argv = [job.module, *job.argv]
    sys.modules.pop(job.module, None)  # as in a fresh interpreter, where `-m` runs it before anything imports it
    runpy.run_module(job.module, run_name="__main__", alter_sys=True)
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    """Serve the socket; in each fork, run the engine."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flows.warm_engine", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True, help="the Unix socket to serve, in a folder only this user opens")
    parser.add_argument("--home", default=os.environ.get("TRTFARM_HOME", "."), help="the project the flows are in")
    parser.add_argument("--module", default=ENGINE, help=argparse.SUPPRESS)  # tests: another engine
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the worker, which stops this process
    server = Server(args.socket, Path(args.home).resolve(), say=lambda line: print(line, file=sys.stderr, flush=True))
    server.warm(args.module)
    job = server.serve()
    run(job._replace(module=args.module))


if __name__ == "__main__":
    main()
