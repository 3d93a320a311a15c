"""The build-matrix flow carries out what planning decided through the same executor as ``trtfarm build``.

A registered encoder is built and released; then its pointer is deleted (a run killed between publish and release).
A build-matrix run on a real Prefect server plans (reading only), and its executor releases the plan in a task
that retries store failures (``settle_model``); the run's outcome carries the typed release outcome.
One Prefect server (on Postgres) serves the module's runs: each test has a store of its own.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

import pytest

from trtfarm import layout
from trtfarm.pipeline import run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import register_export
from trtfarm.store import open_store

from ..farm_server import Farm, farm_client, wait_for
from ..fleet_store import encoder_export
from ..fleets import ONE_RTX_TARGET

FLOW = """\
import asyncio, json, sys
from flows.build_matrix import build_matrix
from trtfarm.planning.requests import MatrixRequest
rows = asyncio.run(build_matrix(MatrixRequest(store=sys.argv[1], targets_file=sys.argv[2], dispatch="local")))
print(json.dumps([{"status": r.outcome.status, "release": r.outcome.release.action if r.outcome.release else None,
                   "text": r.to_json()["release"]} for r in rows]))
"""


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A Prefect server for the module's flow runs."""
    farm = Farm(tmp_path_factory.mktemp("settle-farm"), {})
    try:
        farm.start_server()
        yield farm
    finally:
        farm.stop()


def test_the_flow_releases_what_a_killed_run_left_unreleased_in_a_retried_task(farm, tmp_path):
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    uri = str(tmp_path / "store")
    store = open_store(uri)
    register_export(store, encoder_export(tmp_path / "enc", 0))
    [built] = run_local(MatrixRequest(store=uri, targets_file=str(fleet)), report="none")
    [pointer] = list(store.list(layout.releases_prefix("encoder")))
    released = json.loads(store.get(pointer).data)["manifest"]
    store.delete(pointer)
    since = datetime.now(timezone.utc)
    done = farm.run([sys.executable, "-c", FLOW, uri, str(fleet)], timeout=600)
    rows = json.loads(done.stdout.splitlines()[-1])
    assert rows == [{"status": "up-to-date", "release": "moved",
                     "text": f"released: {pointer}: nothing -> {layout.short_ref(released)}"}], done.stderr[-2000:]
    assert json.loads(store.get(pointer).data)["manifest"] == released == built.outcome.manifest_key
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName, TaskRunFilterStartTime

    def settled():  # task runs reach the server as events, a moment after the flow ends
        with farm_client(farm) as client:  # this run's: those the module's other runs made started before it
            named = TaskRunFilter(name=TaskRunFilterName(like_="settle_model"),
                                  start_time=TaskRunFilterStartTime(after_=since))
            runs = client.read_task_runs(task_run_filter=named)
        return [r.state.type.value for r in runs if r.state] == ["COMPLETED"]

    wait_for(settled, 60, "the settle_model task run, completed")


NIGHTLY = """\
import asyncio, json, sys
from flows.build_matrix import build_matrix
from trtfarm.planning.requests import MatrixRequest
request = MatrixRequest(store=sys.argv[1], targets_file=sys.argv[2], dispatch="local", release=json.loads(sys.argv[3]))
print(json.dumps([r.to_json() for r in asyncio.run(build_matrix(request))]))
"""


def test_the_nightly_publishes_an_unjudged_recipe_as_a_trial_and_releases_it_only_with_release(farm, tmp_path):
    """Issue 57 on the farm's path: the build-matrix flow over every registered model (the nightly), its builds in
    its own tasks, through the same executor and rules as ``trtfarm build``."""
    from ..precision.test_not_judged import two_outputs

    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    uri = str(tmp_path / "store")
    export = tmp_path / "dead"
    export.mkdir()
    two_outputs(export / "model.onnx", bias=-1000.0)  # its output 'dead' carries no signal: fp16 is not judged
    (export / "farm.yaml").write_text("name: dead\nprecision: fp16\nprofiles:\n  - {x: 1x16:8x16:32x16}\n")
    store = open_store(uri)
    register_export(store, export)
    nightly = farm.run([sys.executable, "-c", NIGHTLY, uri, str(fleet), "null"], timeout=600)
    [row] = json.loads(nightly.stdout.splitlines()[-1])
    assert (row["model"], row["status"], row["released"], row["held_by"]) == \
        ("dead", "built", False, "precision gate not judged"), nightly.stderr[-2000:]
    assert "published as a trial: fp16 gate not judged" in row["release"] and "--release" in row["release"]
    assert list(store.list(layout.releases_prefix("dead"))) == []
    released = farm.run([sys.executable, "-c", NIGHTLY, uri, str(fleet), "true"], timeout=600)
    [row] = json.loads(released.stdout.splitlines()[-1])
    assert (row["status"], row["released"], row["held_by"]) == ("up-to-date", True, None), row
    [pointer] = list(store.list(layout.releases_prefix("dead")))
    [event] = json.loads(store.get(pointer).data)["history"]
    assert event["action"] == "forced" and "released anyway with --release" in event["reason"], event
