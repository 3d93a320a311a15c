"""The command a farm run's job starts: its flow-run engine, forked from the worker's warm interpreter.

``prefect.yaml`` sets every deployment's ``command`` job variable to ``python -m trtfarm.workers.run_engine``. The
Prefect process worker starts it as it would start ``python -m prefect.engine``: this process is the one the worker
watches, signals and kills, and its exit status is the run's. It imports nothing but the standard library's
sockets, asks the warm interpreter of ``trtfarm worker`` (``flows/warm_engine.py``, named by ``TRTFARM_WARM_ENGINE``)
to fork the engine with this process's environment, working folder, arguments and standard streams, then:

- passes on each signal it gets (SIGTERM from a cancel or a termination notice, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2);
- if it is killed (SIGKILL), the engine kills itself: it watches this process's end of the connection;
- exits as the engine did: its exit code, or the same signal.

Without a warm interpreter (a plain ``prefect worker start``, a container worker, ``trtfarm worker --cold-start``,
or one whose code changed since it warmed) it becomes ``python -m prefect.engine`` itself (``exec``, same PID).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "TRTFARM_WARM_ENGINE"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
FORKED = b"F"  # the warm interpreter forked the engine; COLD then why (or nothing): start a fresh one
COLD = b"C"
STATUS = struct.Struct("!i")  # the engine's wait status, from waitpid
REQUEST = struct.Struct("!I")  # the request's length, then its JSON
ANSWER_S = 60.0  # the warm interpreter answers at once, or after its warm-up (seconds on a busy host)


def cold(why: str | None) -> None:
    """Become ``python -m prefect.engine`` with this process's arguments (same PID); ``why`` is said first."""
    if why:
        print(f"trtfarm: {why}; starting the run in a fresh interpreter", file=sys.stderr, flush=True)
    try:
        os.execv(sys.executable, [sys.executable, "-m", "prefect.engine", *sys.argv[1:]])
    except OSError as exc:
        print(f"trtfarm: cannot start {sys.executable} ({exc.strerror or exc}); check the worker's Python",
              file=sys.stderr, flush=True)
        os._exit(127)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _forward(sock: socket.socket, signum: int) -> None:
    try:
        sock.sendall(bytes([signum]))
    except OSError:
        pass  # the engine has ended: its status is on its way


def exit_as(status: int) -> None:
    """End this process as a process with wait status ``status`` ended: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the engine's core, if any, is the one to read
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status))


def main() -> None:
    """Have the warm interpreter fork this run's engine, pass signals on and end as it ends; else become it."""
    path = os.environ.get(SOCKET_ENV)
    if not path:
        cold(None)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ANSWER_S)
    try:
        sock.connect(path)
        if peer_uid(sock) != os.getuid():  # the run's environment goes to its own user only
            raise PermissionError(13, "served by another user")
        body = json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(sock, [REQUEST.pack(len(body))], [0, 1, 2])  # the streams ride on the length
        sock.sendall(body)
        answer = _read(sock, 1)
        why = _read(sock, 400).decode(errors="replace") if answer == COLD else ""
    except OSError as exc:
        sock.close()
        cold(f"no warm interpreter at {path} ({exc.strerror or exc})")
    if answer != FORKED:
        sock.close()
        cold(f"the warm interpreter did not fork this run: {why}" if answer else "the warm interpreter went away")
    sock.settimeout(None)
    for signum in FORWARDED:
        signal.signal(signum, lambda s, _frame: _forward(sock, s))
    status = _read(sock, STATUS.size)
    if len(status) < STATUS.size:
        print("trtfarm: the warm interpreter went away while the run ran; its exit status is unknown",
              file=sys.stderr, flush=True)
        os._exit(1)
    exit_as(STATUS.unpack(status)[0])


if __name__ == "__main__":
    main()
