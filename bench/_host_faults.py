"""The soak's host faults: a host that goes away, a host reclaimed with a notice, a host cut off by a partition.

Each worker runs on a host of its own (tests/hosts.py: a network namespace behind a veth pair). A fault waits for a
child building on a host of its pool (``strike``), then strikes that host:

- ``kill``: the host goes away, worker and child together (its link goes silent, every process SIGKILLed);
- ``notice``: the host's ``trtfarm worker`` gets SIGTERM (a spot reclaim's notice, ``docker stop``); once the
  worker has exited the host is removed (the reclaim completes);
- ``partition``: the host's link drops every packet for ``seconds``, then carries on (the child comes back late).

``figures`` reads back, for each fault, when the lost child was seen Crashed, when its resubmission was created,
when the resubmission ended and when the target's release pointer moved, in seconds after the fault.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

RESTORES: list[threading.Timer] = []  # the partitions still to end


def flow_run_of(pid: int) -> str | None:
    """The flow run a process runs (``PREFECT__FLOW_RUN_ID`` in its environment), or None."""
    with contextlib.suppress(OSError):
        for var in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if var.startswith(b"PREFECT__FLOW_RUN_ID="):
                return var.split(b"=", 1)[1].decode()
    return None


def building_child(client, hosts: dict, pool: str, released) -> tuple[str, object] | None:
    """``(host name, run)`` of a child building on a host of ``pool``: its process runs there, its run is Running and
    its target is not released yet (``released(run name)``); None when there is none now."""
    for name, host in hosts.items():
        if not name.startswith(pool) or host.gone:
            continue
        for run_id in filter(None, map(flow_run_of, host.pids())):
            run = client.read_flow_run(run_id)
            if run.state and run.state.is_running() and not released(run.name):
                return name, run
    return None


def strike(kind: str, client, hosts: dict, workers: dict, pool: str, released, seconds: float = 180.0,
           timeout: float = 120.0) -> tuple[str, object] | None:
    """Strike ``kind`` on a host of ``pool`` while its child builds; ``(host name, run)`` struck, or None.

    Builds are short: a kill or a partition cuts the link first, then looks again (still Running, still not
    released, now that nothing it sends arrives?) and restores the link and waits for the next child when the build
    got done first. A notice is a signal: it is sent while the build runs, and cannot be taken back.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = building_child(client, hosts, pool, released)
        if found is None:
            time.sleep(0.05)
            continue
        name, run = found
        host = hosts[name]
        if kind == "notice":
            _notice(host, workers[name])
            return found
        host.cut()
        again = client.read_flow_run(run.id)
        if not (again.state and again.state.is_running() and not released(run.name)):
            host.restore()  # missed: it got done before the cut
            continue
        if kind == "kill":
            host.kill()
        else:
            RESTORES.append(threading.Timer(seconds, host.restore))
            RESTORES[-1].start()
        return found
    return None


def settle(client, struck: list[dict], timeout: float = 180.0) -> None:
    """After the run: let each partition end, and give each struck child that still runs ``timeout`` s to end (a
    cut-off child comes back late)."""
    for timer in RESTORES:
        timer.join()
    deadline = time.monotonic() + timeout
    for f in struck:
        while f.get("run_id") and time.monotonic() < deadline:
            run = client.read_flow_run(f["run_id"])
            if run.state and run.state.is_final() and run.state.type.value != "CRASHED":
                break  # it came back and ended (a lost child stays Crashed unless it comes back)
            if f["fault"] != "partition":
                break
            time.sleep(1)


def _notice(host, worker) -> None:
    """SIGTERM to the host's ``trtfarm worker``; once it has exited, the host is removed (the reclaim completes)."""
    worker.send_signal(signal.SIGTERM)

    def reclaimed() -> None:
        with contextlib.suppress(Exception):
            worker.wait(60)
        host.remove()

    threading.Thread(target=reclaimed, daemon=True).start()


def _at(ts) -> float:
    return ts.timestamp() if isinstance(ts, datetime) else datetime.fromisoformat(ts).timestamp()


def figures(faults: list[dict], runs, client, store, release_key) -> list[dict]:
    """Per fault: seconds from the fault to the lost child's Crashed state, its resubmission, that run's end, the
    release; and how the lost child itself ended (a partitioned one may come back late)."""
    by_name = {r.name: r for r in runs}
    out = []
    for f in faults:
        row = {**{k: f[k] for k in ("fault", "host", "run_name")}, "detect_s": None, "resubmit_s": None,
               "resubmission_s": None, "release_s": None, "lost_child_ended": None, "releases": None}
        states = client.read_flow_run_states(f["run_id"]) if f.get("run_id") else []
        crashed = next((s for s in states if s.type.value == "CRASHED"), None)
        if crashed:
            row["detect_s"] = round(_at(crashed.timestamp) - f["at"], 1)
            row["why"] = (crashed.message or "")[:60]
        if states:
            row["lost_child_ended"] = states[-1].type.value
        job, attempt = f["run_name"].rsplit("-", 1)
        again = by_name.get(f"{job}-{int(attempt) + 1}")
        if again:
            row["resubmit_s"] = round(_at(again.created) - f["at"], 1)
            if again.state and again.state.is_final():
                row["resubmission_s"] = round(_at(again.state.timestamp) - _at(again.created), 1)
        blob = store.get(release_key(job))
        if blob is not None:
            history = json.loads(blob.data)["history"]
            row["releases"] = len(history)
            row["release_s"] = round(_at(history[0]["at"]) - f["at"], 1)
        out.append(row)
    return out
