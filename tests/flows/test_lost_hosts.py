"""Losing GPU hosts on a real farm: a host that goes away with its running child, a worker that gets a termination
notice (SIGTERM), and a host cut off by a network partition whose child comes back after its resubmission.

Each GPU worker runs on its own host: a network namespace joined to the farm by a veth pair (tests/hosts.py), so
"the host is gone" is every process of the namespace SIGKILLed at once behind a silent link, and "the host is cut
off" is its link dropping every packet. The Prefect server (on Postgres) and moto's S3 listen on the host network's
address; the control worker runs beside them. Each scenario has a pool with a concurrency limit of 1 (one GPU) and
two hosts: the first takes the child (a test hook holds it Running, mid-build, while a hold file exists), the second
is there for the resubmission. The partitioned host's pool is the 5090's, so that its scenario runs beside the lost
host's (each waits ~90 s for the server to miss its heartbeats). Farm set-up as a user does it: `trtfarm pools sync`,
`trtfarm farm deploy`, `trtfarm worker`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
import warnings
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows.heartbeats import AUTOMATION, HOST_LOST, TERMINATION_NOTICE, lost_host_automation
from trtfarm import layout, layout_shared
from trtfarm.reports.stored_outcomes import run_outcomes
from trtfarm.store import open_store

from ..conftest import REPO, make_model
from ..farm_server import TRTFARM, Farm, farm_client, wait_for
from ..hosts import HostNetwork

pytestmark = pytest.mark.integration

POOL, TARGET = "rtx-4090", "rtx4090-rtx1.7"
PARTITION_POOL, PARTITION_TARGET = "rtx-5090", "rtx5090-rtx1.7"  # the partitioned host's: its wait overlaps another
# every pool prefect.yaml deploys to must exist for `trtfarm farm deploy` (pools sync makes those with targets);
# the tests build the 4090 target, and the partitioned host's the 5090's
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090, count: 1}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090,
             count: 1}
  rtx-4080: {nvml_name: "NVIDIA GeForce RTX 4080", compute_capability: "8.9", memory_gib: 16, pool: gpu-l4}
  rtx-5080: {nvml_name: "NVIDIA GeForce RTX 5080", compute_capability: "12.0", memory_gib: 16, pool: gpu-h100}
targets:
  - {id: rtx4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx4080-rtx1.7, gpu: rtx-4080, toolchain: rtx-1.7, release_on: built}
  - {id: rtx5080-rtx1.7, gpu: rtx-5080, toolchain: rtx-1.7, release_on: built}
"""
# Loaded by every Python a held host's worker starts (its warm interpreter too: a run forked from it has
# PREFECT__FLOW_RUN_ID by then). A child that creates its build folder while the hold file exists writes
# "<hold>.<run id>" (the folder's path) and waits: Running, mid-build, its heartbeats going on, nothing published yet.
HOLD_HOOK = """\
import os
import sys
import time

if os.environ.get("TRTFARM_TEST_HOLD_FILE"):
    def _hold(event, args):
        if event != "os.mkdir" or not os.path.basename(str(args[0])).startswith("trtfarm-build-"):
            return
        if not os.environ.get("PREFECT__FLOW_RUN_ID"):
            return
        hold = os.environ["TRTFARM_TEST_HOLD_FILE"]
        if os.path.exists(hold):
            with open(f"{hold}.{os.environ['PREFECT__FLOW_RUN_ID']}", "w") as f:
                f.write(str(args[0]))
            while os.path.exists(hold):
                time.sleep(0.2)

    sys.addaudithook(_hold)
"""
DETECT_S = 120  # the bound: a lost host's child is resubmitted within two minutes of the loss


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    import boto3

    from bench._moto import MotoProcess

    net = HostNetwork()
    if not net.available:
        warnings.warn(f"network namespaces unavailable ({net.why_not}): worker hosts are process groups here "
                      "(a host lost = its group SIGKILLed, a partition = its group SIGSTOPped)", stacklevel=1)
    home = tmp_path_factory.mktemp("lost-hosts")
    (home / "gpu_targets.yaml").write_text(FLEET)
    (home / "hook").mkdir()
    (home / "hook" / "sitecustomize.py").write_text(HOLD_HOOK)
    moto = MotoProcess(host=net.address)
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{net.address}:{moto.port}"}
    bucket = f"lost-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name="us-east-1", aws_access_key_id="x",
                 aws_secret_access_key="x").create_bucket(Bucket=bucket)
    f = Farm(home, {**aws, "TRTFARM_STORE": f"s3://{bucket}/store", "TRTFARM_TARGETS": str(home / "gpu_targets.yaml")},
             address=net.address)
    f.net, f.store_env = net, aws
    old = {k: os.environ.get(k) for k in aws}
    os.environ.update(aws)  # this process reads the farm's store
    try:
        f.start_server()
        f.trtfarm("pools", "sync")
        f.trtfarm("farm", "deploy")  # as a user deploys the farm
        f.start_worker("trtfarm-control")
        yield f
    finally:
        f.stop()
        net.close()
        moto.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def _hosts_of_the_test(farm):
    """Each test's hosts go when it ends: the next test's builds go only to its own hosts."""
    farm.test_hosts = []
    yield
    for host in farm.test_hosts:
        host.remove()


def _start_host(farm: Farm, label: str, hold: Path | None = None, pool: str = POOL, hosts: list | None = None):
    """A new host with one `trtfarm worker` of ``pool`` (named after the host), one of ``hosts`` (the test's, by
    default); returns once the worker is online."""
    host = farm.net.host(label)
    (farm.test_hosts if hosts is None else hosts).append(host)
    env = {"TRTFARM_TEST_HOLD_FILE": str(hold)} if hold else {}
    if hold:
        env["PYTHONPATH"] = os.pathsep.join([str(farm.home / "hook"), farm.env.get("PYTHONPATH", "")])
    host.worker = farm.spawn_on(host, f"worker-{label}", [*TRTFARM, "worker", "--pool", pool, "--name", label],
                                env=env)
    with farm_client(farm) as c:
        wait_for(lambda: any(w.name == label and w.status.value == "ONLINE"
                              for w in c.read_workers_for_work_pool(pool)), 180, f"worker {label} to come online")
    return host


def _push(farm: Farm, name: str, seed: int) -> None:
    """Register a model of its own for one test (so its build and release pointer are new)."""
    folder = farm.home / name
    folder.mkdir()
    (folder / "model.onnx").write_bytes(make_model.encoder_model(seed).SerializeToString(deterministic=True))
    (folder / "farm.yaml").write_text((REPO / "examples/encoder/farm.yaml").read_text().replace(
        "name: encoder", f"name: {name}"))
    farm.trtfarm_json("models", "push", str(folder))


def _run_waiting(farm: Farm, model: str, *flags: str) -> subprocess.Popen:
    """`trtfarm farm run MODEL --target T --wait [flags]` in the background, as a user waits on a nightly."""
    return subprocess.Popen([*TRTFARM, "farm", "run", model, "--target", TARGET, "--wait", *flags], env=farm.env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _parent_of(client, model: str) -> str | None:
    """The build-matrix run started for ``model``."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-matrix"])))
    return next((str(r.id) for r in runs if (r.parameters.get("request") or {}).get("model") == model), None)


def _children(client, parent: str) -> dict[str, object]:
    """The parent's child runs by attempt (flow_run_name = <job>-<attempt>)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[uuid.UUID(parent)])))
    return {int(r.name.rsplit("-", 1)[1]): r for r in runs}


def _held_child(farm: Farm, client, parent: str, hold: Path):
    """The first child, Running and held mid-build on the first host; with the build folder it made."""
    def held():
        first = _children(client, parent).get(1)
        marker = Path(f"{hold}.{first.id}") if first else None
        return first if marker and marker.exists() and client.read_flow_run(first.id).state.is_running() else None

    first = wait_for(held, 240, "the first host's worker to take the child and start building")
    return first, Path(Path(f"{hold}.{first.id}").read_text())


def _final(client, run_id, timeout: float = 300):
    return wait_for(lambda: (r := client.read_flow_run(run_id)).state.is_final() and r, timeout,
                     f"run {run_id} to finish")


def _at(ts) -> float:
    return ts.timestamp() if isinstance(ts, datetime) else datetime.fromisoformat(ts).timestamp()


def _release(store, model: str) -> tuple[dict, dict]:
    """The target's release pointer and the provenance of the manifest it names."""
    keys = [k for k in store.list(layout.releases_prefix(model))]
    assert len(keys) == 1, keys
    pointer = json.loads(store.get(keys[0]).data)
    from trtfarm.publishing.attest import read_stored

    stored = read_stored(store, pointer["manifest"])
    return pointer, stored.provenance if stored else {}


def _built_by(provenance) -> str:
    doc = provenance if isinstance(provenance, dict) else json.loads(provenance)
    return json.dumps(doc)


def test_deploy_brings_an_automation_deployed_before_the_state_names_up_to_date(farm):
    """A farm deployed before the lost states had names: its automation crashes runs as plain "Crashed"."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState

    want = lost_host_automation()
    (action,) = want.actions
    old = want.model_copy(update={"actions": [ChangeFlowRunState(state=StateType.CRASHED, name="Crashed",
                                                                 message=action.message)]})
    with farm_client(farm) as client:
        (have,) = client.read_automations_by_name(AUTOMATION)
        client.update_automation(have.id, old)
        assert client.read_automations_by_name(AUTOMATION)[0].actions[0].name == "Crashed"
        done = farm.trtfarm_json("farm", "deploy")
        (now,) = client.read_automations_by_name(AUTOMATION)
    assert done["automation"] == {"name": AUTOMATION, "action": "updated"}
    assert (now.id, now.actions[0].name, now.actions[0].message) == (have.id, HOST_LOST, action.message)
    assert now.trigger.expect == want.trigger.expect  # the window closes on the named ends' events too


def test_a_host_that_goes_away_with_its_running_child_loses_no_build(farm, partitioned):
    model, hold = "lost-host", farm.home / "hold-lost"
    _push(farm, model, 31)
    hold.touch()
    a = _start_host(farm, "host-a", hold)
    waiting = _run_waiting(farm, model, "--json")
    with farm_client(farm) as client:
        parent = wait_for(lambda: _parent_of(client, model), 120, "the run to start")
        first, _ = _held_child(farm, client, parent, hold)
        b = _start_host(farm, "host-b")  # online now, for the resubmission
        assert b.pids()

        lost_at = time.time()
        a.kill()  # the host goes away: worker and child together, behind a silent link
        hold.unlink()

        second = wait_for(lambda: _children(client, parent).get(2), DETECT_S + 60,
                           f"the child lost with host-a (run {first.id}) to be resubmitted")
        resubmitted_after = _at(second.created) - lost_at
        run = _final(client, parent)
        assert run.state.is_completed(), run.state.message
        lost = client.read_flow_run(first.id)
        second = client.read_flow_run(second.id)

    print(f"host lost: crashed after {_at(lost.state.timestamp) - lost_at:.0f} s, resubmitted after "
          f"{resubmitted_after:.0f} s")
    assert resubmitted_after <= DETECT_S, f"resubmitted {resubmitted_after:.0f} s after the host was lost"
    assert lost.state.is_crashed() and "heartbeat" in lost.state.message, lost.state.message
    assert lost.state.name == HOST_LOST  # the automation's name for it, which the parent reads
    assert second.state.is_completed() and second.work_pool_name == POOL
    store = open_store(farm.env["TRTFARM_STORE"])
    pointer, provenance = _release(store, model)
    released_after = _at(pointer["history"][-1]["at"]) - lost_at
    build_s = _at(second.state.timestamp) - _at(second.created)  # the resubmitted child, start to end
    assert released_after <= DETECT_S + build_s + 1, (released_after, build_s)  # 'at' has whole seconds
    assert [e["action"] for e in pointer["history"]] == ["release"]  # moved once
    assert "host-b" in _built_by(provenance)
    rows = run_outcomes(store, parent)[model]
    assert [(o.target, o.status) for o in rows] == [(TARGET, "built")]
    assert "host-a" in rows[0].reason and "host-b" in rows[0].reason and "lost" in rows[0].reason, rows[0].reason
    out, err = waiting.communicate(timeout=120)
    done = json.loads(out)  # what `farm run --wait --json` says: the run, its outcomes, the children it lost
    assert done["state"] == "COMPLETED" and [r["status"] for r in done["outcomes"]] == ["built"], err
    assert [(r["lost"], r["worker"], r["pool"], r["why"], r["resubmitted_as"], r["to_pool"], r["outcome"])
            for r in done["lost"]] == [(first.name, "host-a", POOL, "host lost", second.name, POOL,
                                        "completed by worker host-b")]


def test_a_worker_given_a_termination_notice_has_its_child_resubmitted_at_once(farm):
    model, hold = "noticed", farm.home / "hold-notice"
    _push(farm, model, 32)
    hold.touch()
    a = _start_host(farm, "host-c", hold)
    waiting = _run_waiting(farm, model)
    with farm_client(farm) as client:
        parent = wait_for(lambda: _parent_of(client, model), 120, "the run to start")
        first, folder = _held_child(farm, client, parent, hold)
        _start_host(farm, "host-d")

        noticed_at = time.time()
        os.kill(a.worker.pid, signal.SIGTERM)  # docker stop, kubectl drain, a spot reclaim: the worker's notice
        second = wait_for(lambda: _children(client, parent).get(2), 60,
                           lambda: f"the noticed child's resubmission ({client.read_flow_run(first.id).state!r})")
        resubmitted_after = _at(second.created) - noticed_at
        hold.unlink()
        run = _final(client, parent)
        assert run.state.is_completed(), run.state.message
        noticed = client.read_flow_run(first.id)
        workers = {w.name: w.status.value for w in client.read_workers_for_work_pool(POOL)}

    print(f"notice: crashed after {_at(noticed.state.timestamp) - noticed_at:.1f} s, resubmitted after "
          f"{resubmitted_after:.1f} s")
    assert resubmitted_after <= 10, f"resubmitted {resubmitted_after:.1f} s after the notice"
    assert noticed.state.is_crashed() and "SIGTERM" in noticed.state.message, noticed.state.message
    assert noticed.state.name == TERMINATION_NOTICE
    assert a.worker.wait(60) is not None  # the worker stopped polling and exited
    assert workers["host-c"] == "OFFLINE" or a.worker.poll() is not None
    assert not folder.exists()  # the stopped build left no scratch behind
    store = open_store(farm.env["TRTFARM_STORE"])
    pointer, provenance = _release(store, model)
    assert [e["action"] for e in pointer["history"]] == ["release"]
    assert "host-d" in _built_by(provenance) and "host-c" not in _built_by(provenance)
    rows = run_outcomes(store, parent)[model]
    assert [(o.target, o.status) for o in rows] == [(TARGET, "built")]
    assert "host-c" in rows[0].reason and "notice" in rows[0].reason, rows[0].reason
    out, err = waiting.communicate(timeout=120)  # `farm run --wait`, for people: the table, then the lost children
    assert waiting.returncode == 0, err
    lost = out.split("1 child run(s) lost to their host and resubmitted:", 1)[1]
    assert f"{first.name} on worker host-c (pool {POOL}): notice; resubmitted as" in " ".join(lost.split()), out
    assert "completed by worker host-d" in " ".join(lost.split()) and max(map(len, out.splitlines())) <= 80, out


@pytest.fixture(scope="module")
def partitioned(farm):
    """The partitioned host's scenario up to the cut, on a pool of its own (the 5090's): its host, cut off with its
    child held mid-build, and a second host for the resubmission. Started before the host-lost test, which then
    waits out its own lost host while the server sees this one lost: the two heartbeat windows overlap."""
    model, hold, hosts = "partitioned", farm.home / "hold-partition", []
    _push(farm, model, 33)
    hold.touch()
    a = _start_host(farm, "host-e", hold, PARTITION_POOL, hosts)
    try:
        with farm_client(farm) as client:
            parent = farm.trtfarm_json("farm", "run", model, "--target", PARTITION_TARGET)["flow_run_id"]
            first, _ = _held_child(farm, client, parent, hold)
        _start_host(farm, "host-f", pool=PARTITION_POOL, hosts=hosts)
        cut_at = time.time()
        a.cut()  # the host is cut off: its child lives on, building, but nothing it sends arrives
        yield SimpleNamespace(model=model, hold=hold, host=a, parent=parent, first=first, cut_at=cut_at)
    finally:
        for host in hosts:
            host.remove()


def test_a_partitioned_child_that_comes_back_after_its_resubmission_publishes_nothing_twice(farm, partitioned):
    model, hold, a, parent, first = (partitioned.model, partitioned.hold, partitioned.host, partitioned.parent,
                                     partitioned.first)
    with farm_client(farm) as client:
        try:
            second = wait_for(lambda: _children(client, parent).get(2), DETECT_S + 60,
                               "the cut-off child's resubmission")
            run = _final(client, parent)
        finally:
            a.restore()
        hold.unlink()  # its build goes on, and publishes after its resubmission did
        store = open_store(farm.env["TRTFARM_STORE"])
        jobs = layout_shared.job_result_key(parent, "x").rsplit("/", 1)[0] + "/"
        wait_for(lambda: any(k.endswith("-1.json") for k in store.list(jobs)), 300,
                  "the cut-off child to come back and write its result")
        late = _final(client, first.id, 120)
        states = [s.type.value for s in client.read_flow_run_states(first.id)]

    cut_at = partitioned.cut_at
    print(f"partition: resubmitted after {_at(second.created) - cut_at:.0f} s; the cut-off child ended {states}")
    assert _at(second.created) - cut_at <= DETECT_S
    assert run.state.is_completed(), run.state.message
    assert "CRASHED" in states, states  # seen lost, then it came back
    assert late.state.is_final()
    pointer, provenance = _release(store, model)
    assert [e["action"] for e in pointer["history"]] == ["release"], pointer["history"]  # moved once
    assert "host-f" in _built_by(provenance) and "host-e" not in _built_by(provenance)  # the first publish stands
    folder = pointer["manifest"].rsplit("/", 1)[0] + "/"
    assert [k.rsplit("/", 1)[1] for k in store.list(folder) if k.endswith(".json") and "manifest" in k] == \
        ["manifest.json"]
    late_result = json.loads(store.get(next(k for k in store.list(jobs) if k.endswith("-1.json"))).data)
    assert [o["status"] for o in late_result["outcomes"]] == ["built"]  # it built and published: idempotently
    rows = run_outcomes(store, parent)[model]
    assert [(o.target, o.status) for o in rows] == [(PARTITION_TARGET, "built")]  # counted once
