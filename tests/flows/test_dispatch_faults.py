"""Dispatch faults on a real farm: a target whose work pool the server lacks, and a child its worker took (Pending)
and then died with, before the child's process set it Running.

One `prefect server` on Postgres, the control pool and one GPU pool with a concurrency limit of 1 (one GPU), one
`trtfarm worker` each, moto's S3 as the store, real TensorRT-RTX builds in the children.
"""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from flows.heartbeats import ORPHANED_NAME
from trtfarm.reports.stored_outcomes import run_outcomes
from trtfarm.store import open_store

from ..farm_server import TRTFARM, Farm, farm_client, processes_of_flow_run, wait_for

pytestmark = pytest.mark.integration

POOL = "rtx-4090"
ONE_GPU_FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090, count: 1}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""
# the same fleet plus a GPU whose pool was never created on the server (no `trtfarm pools sync` after adding it)
WITH_A_POOL_THE_SERVER_LACKS = ONE_GPU_FLEET.replace("targets:\n", """\
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: gpu-nowhere}
targets:
  - {id: rtx-5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 1}}
""")
# Loaded by every Python the GPU worker starts: a child's process (it has PREFECT__FLOW_RUN_ID) waits while the hold
# file exists, before Prefect is even imported. So a child held this way stays Pending until the test kills it.
HOLD_HOOK = """\
import os
import time

if os.environ.get("PREFECT__FLOW_RUN_ID"):
    while os.path.exists(os.environ["TRTFARM_TEST_HOLD_FILE"]):
        time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def farm(tmp_path_factory, s3_endpoint):
    import boto3

    home = tmp_path_factory.mktemp("faults")
    (home / "gpu_targets.yaml").write_text(ONE_GPU_FLEET)
    (home / "hook").mkdir()
    (home / "hook" / "sitecustomize.py").write_text(HOLD_HOOK)
    bucket = f"faults-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    f = Farm(home, {"TRTFARM_STORE": f"s3://{bucket}/store", "TRTFARM_TARGETS": str(home / "gpu_targets.yaml"),
                    "TRTFARM_TEST_HOLD_FILE": str(home / "hold")})
    try:
        f.start_server()
        f.trtfarm("pools", "sync")
        f.deploy("build-matrix", POOL)
        f.start_worker("trtfarm-control")
        start_gpu_worker(f)
        yield f
    finally:
        f.stop()


def start_gpu_worker(farm: Farm):
    """The GPU pool's worker, with the hold hook on its Python path; returns once its pool is READY."""
    hook = os.pathsep.join([str(farm.home / "hook"), farm.env.get("PYTHONPATH", "")])
    proc = farm.spawn(f"worker-{POOL}-{len(farm.procs)}", [*TRTFARM, "worker", "--pool", POOL, "--name",
                                                          f"test-{POOL}"], env={"PYTHONPATH": hook})
    with farm_client(farm) as c:
        wait_for(lambda: c.read_work_pool(POOL).status.value == "READY", 180, f"{POOL}'s worker to come online")
    return proc


def _children_of(client, parent_id: str) -> list:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-target"])))
    return [r for r in runs if r.parent_task_run_id
            and str(client.read_task_run(r.parent_task_run_id).flow_run_id) == parent_id]


def _why_not_taken(farm, client, parent: str) -> str:
    """What a wait for the held child saw: the parent's state, its children's, the workers' last log lines."""
    run = client.read_flow_run(parent)
    children = [(r.name, r.state.name if r.state else None) for r in _children_of(client, parent)]
    logs = {name: farm.log(name).splitlines()[-6:] for name in farm.procs if name.startswith("worker-")}
    return (f"the worker to take the child; parent {run.state.name if run.state else None} "
            f"({run.state.message if run.state else ''}); children {children}; logs {logs}")


def test_a_pool_missing_on_the_server_skips_only_its_targets_and_the_report_is_written(farm, example_dir):
    farm.trtfarm_json("models", "push", str(example_dir))
    fleet = farm.home / "with-a-missing-pool.yaml"
    fleet.write_text(WITH_A_POOL_THE_SERVER_LACKS)

    done = farm.trtfarm_json("farm", "run", "encoder", "--targets-file", str(fleet), "--wait")

    assert done["state"] == "COMPLETED", done["message"]
    rows = {r["target"]: r for r in done["outcomes"]}  # read back from the run's report in the store
    assert {t: r["status"] for t, r in rows.items()} == {"rtx-4090-rtx1.7": "built", "rtx-5090-rtx1.7": "skipped"}
    why = rows["rtx-5090-rtx1.7"]["reason"]
    assert "work pool gpu-nowhere is not on the Prefect server" in why and "trtfarm pools sync" in why
    assert "gpu_targets.yaml" in why


def test_a_child_whose_worker_dies_while_it_is_pending_is_crashed_resubmitted_and_frees_the_pool(farm, example_dir):
    with farm_client(farm) as client:
        assert client.read_work_pool(POOL).concurrency_limit == 1  # the stuck child would hold the only slot
        (farm.home / "hold").touch()  # the worker's next child process holds before it can set its run Running
        started = farm.trtfarm_json("farm", "run", "encoder", "--target", "rtx-4090-rtx1.7", "--force",
                                    "--child-pending-limit", "20")
        parent = started["flow_run_id"]
        held = wait_for(lambda: [r for r in _children_of(client, parent) if r.state.is_pending()
                                  and processes_of_flow_run(str(r.id))], 180,
                        lambda: _why_not_taken(farm, client, parent))[0]

        # the worker dies with its child's process: nobody will ever set the run Running
        worker = next(p for name, p in farm.procs.items() if name.startswith(f"worker-{POOL}") and p.poll() is None)
        os.killpg(worker.pid, signal.SIGKILL)
        for pid in processes_of_flow_run(str(held.id)):
            os.kill(pid, signal.SIGKILL)
        worker.wait()
        (farm.home / "hold").unlink()
        start_gpu_worker(farm)  # a new worker (same name): it never heard of the held run

        run = wait_for(lambda: (r := client.read_flow_run(parent)).state.is_final() and r, 300,
                        "the parent to finish")
        assert run.state.is_completed(), run.state.message
        children = {r.name.rsplit("-", 1)[1]: r for r in _children_of(client, parent)}
        first = client.read_flow_run(held.id)
        assert first.state.is_crashed() and first.state.name == ORPHANED_NAME  # the name says how it was lost
        assert f"child run {held.name} ({held.id}) was Pending for" in first.state.message
        assert f"on pool {POOL} (limit 20 s" in first.state.message
        assert sorted(children) == ["1", "2"] and children["2"].state.is_completed()  # the slot was freed
    rows = run_outcomes(open_store(farm.env["TRTFARM_STORE"]), parent)["encoder"]
    assert [(o.target, o.status) for o in rows] == [("rtx-4090-rtx1.7", "built")]
    assert f"resubmitted after child run {held.name} was lost on" in rows[0].reason
    assert f"pool {POOL}" in rows[0].reason and "left Pending by a worker that is gone" in rows[0].reason

