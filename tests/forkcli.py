"""``python -m trtfarm ARGS`` as a fork of a process that has already started, for tests that run many commands.

A command's process spends most of its CPU before the command runs: the interpreter's start and the imports of
typer, rich and pydantic (0.2-0.3 s on the 2-core test machine, more than most commands take). Here a server
process is started with the caller's environment and the same interpreter, and imports what most commands import
before their own module (``trtfarm.cli.main``, typer's adapters and pydantic, the run requests' models), noting
every environment variable those imports read. A later command whose environment agrees on each of them (and on
what the interpreter reads at its start) is served by the same process. Each command is then a fork of it that goes on
as ``trtfarm/__main__.py`` does after that import: in its own folder (``cwd``), with its own standard input, output
and error (files, read back whole) and its own exit, by code or by signal. So a command still runs in a process of
its own, with what the environment says at import read from that environment; only the shared start is not paid
again. A test of the start itself (imports, signals sent to a running command, a command's wall time) runs
``python -m trtfarm`` as a plain subprocess instead. What a fork still shares with its server: the hash seed (a set's
order) and the memory layout. ``FORKCLI=0`` in the tests' environment runs every command as a plain process, the
check that the forks change nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

# Reads one JSON request a line ({"argv", "env", "cwd", "stdin"}), answers the fork's pid, then its exit code and the
# names of the files that hold its output and error.
SERVER = r"""
import json, os, sys, tempfile
read = set()
get, contains, iterate = os._Environ.__getitem__, os._Environ.__contains__, os._Environ.__iter__
os._Environ.__getitem__ = lambda self, key: read.add(key) or get(self, key)
os._Environ.__contains__ = lambda self, key: read.add(key) or contains(self, key)
os._Environ.__iter__ = lambda self: read.add("*") or iterate(self)
import trtfarm
import trtfarm.cli.main, typer._adapters, trtfarm.planning.requests
os._Environ.__getitem__, os._Environ.__contains__, os._Environ.__iter__ = get, contains, iterate
from trtfarm.cli.main import main
sys.argv[0] = os.path.join(os.path.dirname(trtfarm.__file__), "__main__.py")
__package__ = "trtfarm"  # as -m leaves it: click names the program `python -m trtfarm` by it
print(json.dumps(sorted(read)), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    fd, out = tempfile.mkstemp(prefix="forkcli-out-")
    os.close(fd)
    fd, err = tempfile.mkstemp(prefix="forkcli-err-")
    os.close(fd)
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        os.dup2(os.open(request["stdin"] or os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(out, os.O_WRONLY), 1), os.dup2(os.open(err, os.O_WRONLY), 2)
        sys.argv[1:] = request["argv"]
        main()
        sys.exit(0)
    print(json.dumps({"pid": pid}), file=sys.__stdout__, flush=True)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"code": code, "out": out, "err": err}), file=sys.__stdout__, flush=True)
"""


class Server:
    """One forking server, started with ``env``."""

    def __init__(self, env: Mapping[str, str]):
        self.env = dict(env)
        self.busy = threading.Lock()
        # Unbuffered, so that a reply's line is never read ahead into a buffer that ``select`` cannot see; its
        # error to nowhere, as a captured command's is not a terminal (rich decides its colours from it at import).
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], env=self.env, cwd="/", bufsize=0,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            self.read = set(self._answer(120))
        except (TimeoutError, RuntimeError):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("the forking server did not start") from None

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a command with ``env`` would have started as this server did: the two agree on every variable
        the interpreter's start or the server's imports read (all of them, where an import read them all)."""
        if self.proc.poll() is not None:
            return False
        if "*" in self.read:
            return dict(env) == self.env
        names = self.read | {k for k in {*env, *self.env} if k.startswith(START_PREFIXES) or k in START_NAMES}
        return all(env.get(k) == self.env.get(k) for k in names)

    def _answer(self, timeout: float | None):
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking server exited {self.proc.wait()}")
        return json.loads(line)

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str, input: str | None,
            timeout: float | None) -> subprocess.CompletedProcess:
        stdin = None
        if input is not None:
            fd, stdin = tempfile.mkstemp(prefix="forkcli-in-")
            with os.fdopen(fd, "w") as f:
                f.write(input)
        try:
            request = {"argv": list(argv), "env": dict(env), "cwd": str(Path(cwd).resolve()), "stdin": stdin}
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            pid = self._answer(60)["pid"]
            try:
                done = self._answer(timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # (unless it ended meanwhile)
                    os.killpg(pid, signal.SIGKILL)
                done = self._answer(60)
                self._remove(done)
                raise subprocess.TimeoutExpired(list(argv), timeout) from None
        finally:
            if stdin is not None:
                os.unlink(stdin)
        out, err = (Path(done[k]).read_text() for k in ("out", "err"))
        self._remove(done)
        return subprocess.CompletedProcess(list(argv), done["code"], out, err)

    @staticmethod
    def _remove(done: dict) -> None:
        for key in ("out", "err"):
            Path(done[key]).unlink(missing_ok=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# What the process reads at its start, before the server can see what is read: the dynamic loader's variables (a
# preloaded library, the library path a later dlopen searches), the C library's, the interpreter's own, the locale
# (the streams' encoding), the time zone (read by ``time`` when it loads), the home folder (the user's site folder)
# and the temporary folder (``tempfile``'s, kept).
START_PREFIXES = ("LD_", "GLIBC_", "MALLOC_", "PYTHON", "LC_")
START_NAMES = {"LANG", "TZ", "HOME", "TMPDIR", "TEMP", "TMP"}
_SERVERS: list[Server] = []
_LOCK = threading.Lock()


def trtfarm(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | str = ".",
            input: str | None = None, timeout: float | None = 300, check: bool = False) \
        -> subprocess.CompletedProcess:
    """What ``python -m trtfarm ARGV`` (run in ``cwd`` with ``env``, this process's by default) exited with and
    printed, as ``subprocess.run(..., capture_output=True, text=True)`` gives it."""
    env = dict(os.environ if env is None else env)
    if os.environ.get("FORKCLI") == "0":  # every command a plain process: the check that forks change nothing
        return _plain(argv, env, cwd, input, timeout, check)
    with _LOCK:  # a server runs one command at a time: a caller takes one that is free, or starts one
        server = next((s for s in _SERVERS if s.serves(env) and s.busy.acquire(blocking=False)), None)
    if server is None:
        try:
            server = Server(env)
        except RuntimeError:  # an environment in which the imports fail: what a plain process does there
            return _plain(argv, env, cwd, input, timeout, check)
        server.busy.acquire()
        with _LOCK:
            _SERVERS.append(server)
    try:
        done = server.run([str(a) for a in argv], env, cwd, input, timeout)
    finally:
        server.busy.release()
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done


def _plain(argv, env, cwd, input, timeout, check) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtfarm", *map(str, argv)], env=env, cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=timeout, check=check)


@atexit.register
def close_all() -> None:
    """Stop every server (each ends when its input closes)."""
    for server in _SERVERS:
        server.close()
    _SERVERS.clear()
