"""Lost hosts without a farm: the heartbeat settings every deployment carries, the automation's window, how a crash
is read, when a child is resubmitted, the lost-children rows, and `trtfarm worker` passing a notice on.

The farm itself (a host killed, a notice, a partition) is tests/flows/test_lost_hosts.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.states import Cancelled, Crashed, Failed

from flows.dispatch import MAX_LOSSES, ChildRun, Loss, _resubmit, lost_rows
from flows.heartbeats import (
    AUTOMATION,
    HEARTBEAT_S,
    HOST_LOST,
    LOST,
    LOST_AFTER_S,
    NOTICE,
    ORPHANED,
    ORPHANED_NAME,
    TAG,
    TERMINATION_NOTICE,
    _same,
    loss_of,
    lost_host_automation,
)
from trtfarm import interrupt
from trtfarm.vocabulary.target_outcome import LostChild

from ..conftest import REPO

DEPLOYMENTS = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_deployment_beats_often_enough_and_is_watched_by_the_automation(deployment):
    env = deployment["work_pool"]["job_variables"]["env"]
    assert int(env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]) == HEARTBEAT_S >= 30  # Prefect's minimum
    assert TAG in deployment["tags"]  # the automation watches the runs of trtfarm's deployments only


def test_the_automation_crashes_a_run_three_heartbeats_after_its_last_and_no_sooner():
    a = lost_host_automation()
    assert a.name == AUTOMATION and a.trigger.posture.value == "Proactive"
    assert a.trigger.within.total_seconds() == LOST_AFTER_S == 3 * HEARTBEAT_S
    # the window restarts at each heartbeat, and the loss comes after the last one: seen 60-95 s after it (the server
    # looks every 5 s), within the two minutes
    assert LOST_AFTER_S + 5 <= 120
    # the window opens at Running too: a host lost before its first heartbeat reached the server is seen
    assert a.trigger.after == {"prefect.flow-run.Running", "prefect.flow-run.heartbeat"}
    assert "prefect.flow-run.Running" not in a.trigger.expect
    # a run that ends any way Prefect ends a flow run is never crashed afterwards
    assert {f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")} <= a.trigger.expect
    assert a.trigger.match_related["prefect.resource.id"] == [f"prefect.tag.{TAG}"]
    (action,) = a.actions
    assert action.state.value == "CRASHED" and action.name == HOST_LOST and action.message == LOST
    assert not action.force  # a final state stays


NOTICED = f"{NOTICE} on worker gpu-h100-3: the build stopped at once and published nothing"
PENDING = (f"child run x-1 (...) was Pending for 130 s on pool p (limit 120 s, child_pending_limit_s) and no worker "
           f"of pool p is online: {ORPHANED}")
SIGKILL = "Process exited with status code: -9; This indicates that the process exited due to a SIGKILL signal."


@pytest.mark.parametrize(("state", "kind"), [
    (Crashed(name=HOST_LOST, message=LOST), "host lost"),  # as the automation sets it
    (Crashed(name=TERMINATION_NOTICE, message=NOTICED), "notice"),  # as flows/build_target.py ends
    (Crashed(name=ORPHANED_NAME, message=PENDING), "orphaned"),  # as flows/pending.py sets it
    (Crashed(name=HOST_LOST, message="anything at all"), "host lost"),  # the name says it, whatever the message
    (Crashed(name=TERMINATION_NOTICE), "notice"),
    (Crashed(name=ORPHANED_NAME, message=SIGKILL), "orphaned"),
    (Crashed(message=LOST), "crashed"),  # the texts without the names are crashes of the run's own
    (Crashed(message=NOTICED), "crashed"),
    (Crashed(message=PENDING), "crashed"),
    (Crashed(message=SIGKILL), "crashed"),
    (Crashed(message="Execution was aborted by a termination signal."), "crashed"),
    (Crashed(), "crashed"),
    (Failed(name=HOST_LOST, message=LOST), "crashed"),  # a name counts on a CRASHED state only
    (Cancelled(name=TERMINATION_NOTICE, message=NOTICED), "crashed"),
], ids=lambda v: f"{v.type.value}:{v.name}:{(v.message or '')[:12]}" if hasattr(v, "type") else v)
def test_a_crashed_childs_state_type_and_name_say_what_was_lost_not_its_message(state, kind):
    assert loss_of(state) == kind


def test_each_loss_has_its_own_name_and_every_end_closes_the_automations_window():
    assert len({HOST_LOST, TERMINATION_NOTICE, ORPHANED_NAME, "Crashed"}) == 4
    # Prefect names a state's event by the state's name: a child ended by a notice (or orphaned, or crashed by the
    # automation) must close the window, or the automation would crash it again over its notice
    expect = lost_host_automation().trigger.expect
    assert {f"prefect.flow-run.{n}" for n in (HOST_LOST, TERMINATION_NOTICE, ORPHANED_NAME)} <= expect


def test_an_automation_deployed_before_the_names_differs_from_ours_so_deploy_updates_it():
    """sync_automation updates the server's copy when its actions or trigger differ (the farm test deploys it)."""
    want = lost_host_automation()
    old_action = ChangeFlowRunState(state=StateType.CRASHED, name="Crashed", message=LOST)
    assert not _same([old_action], want.actions)
    old_trigger = want.trigger.model_copy(update={"expect": want.trigger.expect - {
        f"prefect.flow-run.{n}" for n in (HOST_LOST, TERMINATION_NOTICE, ORPHANED_NAME)}})
    assert not _same(old_trigger, want.trigger)
    assert _same(lost_host_automation().actions, want.actions) and _same(lost_host_automation().trigger, want.trigger)


def _losses(*kinds: str) -> list[Loss]:
    return [Loss(f"id{i}", f"m-t-{i + 1}", "p", "w", k, "") for i, k in enumerate(kinds)]


def test_a_child_is_resubmitted_once_per_lost_host_and_once_after_a_crash_of_its_own():
    host_kinds = ("host lost", "notice", "orphaned")
    for kind in host_kinds:
        assert all(_resubmit(_losses(*[kind] * n)) for n in range(1, MAX_LOSSES + 1))
        assert not _resubmit(_losses(*[kind] * (MAX_LOSSES + 1)))
    assert _resubmit(_losses("crashed")) and not _resubmit(_losses("crashed", "crashed"))
    assert _resubmit(_losses("host lost", "crashed")) and not _resubmit(_losses("crashed", "notice", "crashed"))


def test_the_lost_rows_name_where_each_loss_ran_and_where_it_went_next():
    losses = (Loss("a", "enc-t-1", "rtx-4090", "host-a", "host lost", LOST),
              Loss("b", "enc-t-2", "rtx-5090", "", "notice", NOTICE))
    rows = lost_rows([ChildRun("c", "COMPLETED", "", 3, "rtx-4090", "host-c", losses), ChildRun("d", "COMPLETED", "",
                                                                                                  1, "rtx-4090")])
    assert [(r.lost, r.worker, r.pool, r.why, r.resubmitted_as, r.to_pool, r.outcome) for r in rows] == [
        ("enc-t-1", "host-a", "rtx-4090", "host lost", "enc-t-2", "rtx-5090", "lost again"),
        ("enc-t-2", "", "rtx-5090", "notice", "enc-t-3", "rtx-4090", "completed by worker host-c")]
    gave_up = (Loss("e", "enc-t-1", "p", "w", "crashed", "exit -11"), Loss("f", "enc-t-2", "p", "w", "crashed", ""))
    (_, last) = lost_rows([ChildRun("f", "CRASHED", "", 2, "p", "", gave_up)])
    assert (last.resubmitted_as, last.outcome) == (None, "not resubmitted after a second crash of its own")
    assert LostChild.from_json(json.loads(json.dumps(last.to_json()))) == last  # the artifact's row, read back
    assert "worker host-a (pool rtx-4090)" in losses[0].sentence() and f"{LOST_AFTER_S} s" in losses[0].sentence()
    assert losses[1].sentence().startswith("child run enc-t-2 was lost on pool rtx-5090")


def test_stopping_on_lends_the_signal_to_the_stop_and_gives_it_back():
    before = signal.getsignal(signal.SIGUSR1)
    with interrupt.stopping_on(signal.SIGUSR1):
        assert signal.getsignal(signal.SIGUSR1) is interrupt.stop
    assert signal.getsignal(signal.SIGUSR1) is before


# A stand-in for `prefect worker start` with one running build: on SIGTERM it kills its build, as Prefect's worker
# does, unless the build has ended (then it writes `stopped`); the build, on SIGTERM, writes `noticed` and exits, as
# a build-target child does.
WORKER = """\
import os, signal, subprocess, sys, time
out = sys.argv[1]
build = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
def noticed(s, f):
    open(os.path.join(sys.argv[1], "noticed"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, noticed)
open(os.path.join(sys.argv[1], "building"), "w").write(str(os.getpid()))
while True:
    time.sleep(0.1)
''', out], env={**os.environ, "PREFECT__FLOW_RUN_ID": "stand-in"})
stop = []
signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
while not stop:
    time.sleep(0.1)
if build.poll() is None:
    build.kill()
else:
    open(os.path.join(out, "stopped"), "w").close()
"""
SUPERVISOR = """\
import sys
from trtfarm.workers.supervise import supervise
sys.exit(supervise([sys.executable, sys.argv[1], sys.argv[2]], {}, print, grace_s=20))
"""


def _wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def _supervised(tmp_path: Path) -> subprocess.Popen:
    (tmp_path / "worker.py").write_text(WORKER)
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path / "worker.py"), str(tmp_path)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    _wait_for_file(tmp_path / "building")
    return proc


def test_a_termination_notice_stops_the_workers_polling_and_reaches_its_running_build(tmp_path):
    proc = _supervised(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert (tmp_path / "stopped").exists() and (tmp_path / "noticed").exists()
    assert "termination notice (SIGTERM): the worker stopped polling; passed the notice on to 1 running build(s)" \
        in out


def test_a_killed_trtfarm_worker_takes_its_prefect_worker_with_it(tmp_path):
    proc = _supervised(tmp_path)
    worker = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == proc.pid)
    build = int((tmp_path / "building").read_text())
    proc.kill()
    proc.wait()
    try:
        deadline = time.monotonic() + 10
        while _exists(worker):
            assert time.monotonic() < deadline, "the worker outlived trtfarm worker"
            time.sleep(0.05)
        assert _exists(build) and not (tmp_path / "noticed").exists()  # no notice: the build runs on and reports
    finally:
        os.kill(build, signal.SIGKILL)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _exists(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
