"""``trtfarm worker``'s own process: the Prefect worker runs as its child, and a termination notice reaches the builds.

A host about to go away says so with a SIGTERM to the worker's process alone: ``docker stop`` and ``kubectl drain``
signal the container's first process, systemd the service's main process, and a spot instance's reclaim ends in
one of them. Prefect's worker, on SIGTERM, stops polling and waits for the runs it started to finish; it does not
pass the signal on, so a two-minute notice would be spent building a plan that is then lost with the host. So
``trtfarm worker`` keeps the Prefect worker as its child and, on SIGTERM:

1. stops the Prefect worker (SIGSTOP): it polls no more, so it takes no new run, not even its own child's
   resubmission; nor can it kill its builds, which Prefect's worker does when it shuts down (it SIGTERMs, closes
   their output and SIGKILLs them at once, before they can report);
2. sends SIGTERM to each flow-run process the worker started: each build stops, publishes nothing, and its run ends
   Crashed with the notice (flows/build_target.py), so the parent resubmits it at once on another worker;
3. once they have ended (at most ``GRACE_S``), lets the worker go on with a SIGTERM (Prefect's own stop: it says so
   to the server), SIGKILLs it if it lingers, and exits 143.

SIGINT (Ctrl-C) goes to the Prefect worker alone: Prefect's own stop. The Prefect worker dies with this process
(``PR_SET_PDEATHSIG``): killing ``trtfarm worker`` kills the worker, as when it was the same process; the builds it
started keep running and report, as before. A SIGTERM sent to every process at once (a whole container or cgroup)
reaches the Prefect worker too, which then kills its builds before they report: the heartbeat automation
(flows/heartbeats.py) crashes those runs 60-95 s later, and the parent resubmits them then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

GRACE_S = 25.0  # builds stop in a second or two; this bounds a Prefect worker that would not exit
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def flow_runs_of(pid: int) -> list[int]:
    """The builds a process worker ``pid`` started, from /proc: its running children that run a flow.

    A flow-run process has ``PREFECT__FLOW_RUN_ID`` in its environment.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            if any(v.startswith(b"PREFECT__FLOW_RUN_ID=") for v in (entry / "environ").read_bytes().split(b"\0")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _running(pid: int) -> bool:
    """Whether ``pid`` is still running (an exited child its stopped parent has not reaped yet is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def supervise(argv: list[str], env: dict[str, str], say: Callable[[str], None], grace_s: float = GRACE_S,
              beside: list[str] | None = None) -> int:
    """Run ``argv`` (``prefect worker start ...``) as a child until it exits; returns the exit status to use.

    ``say`` gets one line when a notice arrives and what was done with it. ``beside`` (the warm interpreter the runs
    fork from, ``flows/warm_engine.py``) runs as another child from before the worker starts until after it ends.
    """
    helper = subprocess.Popen(beside, env=env, preexec_fn=_die_with_parent) if beside else None  # noqa: PLW1509
    try:
        return _supervise(argv, env, say, grace_s)
    finally:
        if helper is not None:
            helper.terminate()
            try:
                helper.wait(5)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()


def _supervise(argv: list[str], env: dict[str, str], say: Callable[[str], None], grace_s: float) -> int:
    proc = subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only, no threads yet
    noticed: list[int] = []
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, lambda s, f: noticed.append(s)),
                signal.SIGINT: signal.signal(signal.SIGINT, lambda s, f: _signal(proc.pid, signal.SIGINT))}
    try:
        while proc.poll() is None:
            if noticed:
                return _pass_on_notice(proc, say, grace_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.2)
        return proc.returncode
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _pass_on_notice(proc: subprocess.Popen, say: Callable[[str], None], grace_s: float) -> int:
    _signal(proc.pid, signal.SIGSTOP)  # first: it polls no more, and cannot kill the builds it started
    runs = flow_runs_of(proc.pid)
    for pid in runs:
        _signal(pid, signal.SIGTERM)
    say(f"termination notice (SIGTERM): the worker stopped polling; passed the notice on to {len(runs)} running "
        "build(s)")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(p) for p in runs):
        time.sleep(0.1)
    _signal(proc.pid, signal.SIGTERM)  # pending until it runs again: its first act is to stop
    _signal(proc.pid, signal.SIGCONT)
    try:
        proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        say(f"the Prefect worker did not exit within {grace_s:.0f} s of the notice: killing it")
        proc.kill()
        proc.wait()
    return 128 + signal.SIGTERM
