"""Runs taken when the server announces them (flows/listening_worker.py), on a real farm whose workers poll once
every 10 minutes.

A Prefect worker polls at start, then every ``PREFECT_WORKER_QUERY_SECONDS`` (here 600, so at least 7 minutes
apart with Prefect's jitter). A farm run made after the workers started needs both its runs taken (the parent on the
control pool, its child on the GPU pool), so it can only complete within minutes if each was taken when the server
announced it. The same farm run with `--poll-only` workers is the control: its parent is still Scheduled a minute on.
"""

from __future__ import annotations

import time
import uuid

import pytest

from ..farm_server import TRTFARM, Farm, farm_client, wait_for
from ..fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration

POOL = "rtx-4090"
SLOW_POLLS = {"PREFECT_WORKER_QUERY_SECONDS": "600"}


@pytest.fixture(scope="module")
def farm(tmp_path_factory, s3_endpoint):
    import boto3

    home = tmp_path_factory.mktemp("announced")
    (home / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    bucket = f"announced-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    f = Farm(home, {"TRTFARM_STORE": f"s3://{bucket}/store", "TRTFARM_TARGETS": str(home / "gpu_targets.yaml")})
    try:
        f.start_server()
        f.trtfarm("pools", "sync")
        f.deploy("build-matrix", POOL)
        yield f
    finally:
        f.stop()


def _workers(farm: Farm, *extra: str) -> list:
    procs = [farm.spawn(f"worker-{pool}-{len(farm.procs)}", [*TRTFARM, "worker", "--pool", pool, "--name",
                                                               f"test-{pool}", *extra], env=SLOW_POLLS)
             for pool in ("trtfarm-control", POOL)]
    with farm_client(farm) as c:  # online: the first poll and the first heartbeat are behind them
        wait_for(lambda: all(c.read_work_pool(p).status.value == "READY" for p in ("trtfarm-control", POOL)), 180,
                 "the workers to come online")
    time.sleep(3)  # and whatever the first poll took is taken
    return procs


def _stop(procs: list) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(60)


def _final(farm: Farm, run_id: str, within: float, what: str):
    with farm_client(farm) as c:
        return wait_for(lambda: (r := c.read_flow_run(run_id)).state.is_final() and r, within, what)


def test_a_run_is_taken_when_the_server_announces_it_not_on_the_next_poll(farm, example_dir):
    farm.trtfarm_json("models", "push", str(example_dir))
    polling = _workers(farm, "--poll-only")
    try:
        started = farm.trtfarm_json("farm", "run", "encoder", "--force")
        time.sleep(20)
        with farm_client(farm) as c:
            assert c.read_flow_run(started["flow_run_id"]).state.is_scheduled()  # no poll yet: nobody took it
            c.delete_flow_run(started["flow_run_id"])
    finally:
        _stop(polling)

    listening = _workers(farm)
    try:
        started = farm.trtfarm_json("farm", "run", "encoder", "--force")
        # by polls alone: the parent, then its child, each at least 7 minutes after its workers' last poll
        run = _final(farm, started["flow_run_id"], 240, "the parent and its child taken as the server announced them")
        assert run.state.is_completed(), run.state.message
        with farm_client(farm) as c:
            from prefect.client.schemas.filters import FlowFilter, FlowFilterName

            children = c.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-target"])))
        assert [r.state.type.value for r in children] == ["COMPLETED"]
        # and each was forked from its worker's warm interpreter: a run that is not says so in its worker's log
        logs = {name: farm.log(name) for name in farm.procs if name.startswith("worker-")}
        assert not [name for name, text in logs.items() if "fresh interpreter" in text], logs
    finally:
        _stop(listening)
