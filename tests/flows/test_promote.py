"""Release channels on the farm: a nightly run releases to candidate; the promote deployment moves it after receipts.

A real Prefect server (Postgres), the build-matrix, build-target and promote-candidates deployments from
prefect.yaml, a ``trtfarm worker`` on the control pool and one on the GPU's pool, both signing with the farm's key,
a file store and real TensorRT-RTX builds. The encoder's first export (no ``promotion:``) is stable; its second
declares ``promotion: {receipts: 1, soak_s: 0}``.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from trtfarm.pipeline import run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.registry import register_export
from trtfarm.publishing.release_check import check_claim, read_pointer
from trtfarm.releases.channels import channel_history, record_receipt
from trtfarm.releases.receipts import new_receipt
from trtfarm.signing.keys import load_trusted_keys
from trtfarm.store import open_store
from trtfarm.vocabulary.promotion import ReceiptHost

from ..farm_server import REPO, TRTFARM, Farm, farm_client, wait_for
from ..fleet_store import encoder_export
from ..fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
STABLE = "releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json"
CANDIDATE = "candidates/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json"
PROMOTION = "promotion: {receipts: 1, soak_s: 0}\n"
POOLS = ("trtfarm-control", "rtx-4090")
CANARY = ReceiptHost(name="canary-1", gpu_name="NVIDIA GeForce RTX 4090", compute_capability="8.9",
                     pci_device_id="0x2684")  # a serving host whose GPU the target serves


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """Server, deployments, a control and a GPU pool worker; a store where export 0 of the encoder is stable."""
    from ..test_signing import key_pair

    home = tmp_path_factory.mktemp("promote-farm")
    fleet = home / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    store_uri = str(home / "store")
    register_export(open_store(store_uri), encoder_export(home / "enc0", 0))
    run_local(MatrixRequest(store=store_uri, targets_file=str(fleet), dispatch="local"), report="none")
    f = Farm(home, {"TRTFARM_STORE": store_uri, "TRTFARM_TARGETS": str(fleet),
                    "TRTFARM_SIGNING_KEY": str(key_pair(home, "farm")[0]), "TRTFARM_TRUSTED_KEYS": ""})
    f.public_key = home / "farm.pub"
    try:
        f.start_server()
        f.trtfarm("pools", "sync")
        f.deploy("build-matrix", "promote-candidates", "rtx-4090")
        for pool in POOLS:
            f.start_worker(pool)
        with farm_client(f) as c:
            wait_for(lambda: all(c.read_work_pool(p).status.value == "READY" for p in POOLS), 180, "the workers")
        yield f
    finally:
        f.stop()


def _run(farm, deployment: str, request: dict):
    """Start a run of ``deployment`` as its schedule would (with ``request``) and wait for it to end."""
    with farm_client(farm) as client:
        dep = client.read_deployment_by_name(deployment)
        run = client.create_flow_run_from_deployment(dep.id, parameters={"request": request})
        deadline = time.monotonic() + 300
        while not (run := client.read_flow_run(run.id)).state.is_final():
            assert time.monotonic() < deadline, farm.log("worker-trtfarm-control")[-4000:]
            time.sleep(0.5)
        assert run.state.is_completed(), f"{run.state.message}\n{farm.log('worker-trtfarm-control')[-4000:]}"
        return run


def _report(farm, run) -> str:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

    with farm_client(farm) as client:
        [artifact] = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
                                           artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
                                               any_=["promote-candidates"])))
    return artifact.data


def test_a_nightly_run_releases_to_candidate_and_the_promote_deployment_moves_it_after_receipts(farm):
    store = open_store(farm.env["TRTFARM_STORE"])
    stable_before, _ = read_pointer(store, STABLE)
    second = encoder_export(farm.home / "enc1", 1)
    (second / "farm.yaml").write_text((second / "farm.yaml").read_text() + PROMOTION)
    register_export(store, second)

    # the nightly: every registered model's latest export, one child run on the GPU's pool
    _run(farm, "build-matrix/build-matrix", {})
    candidate, _ = read_pointer(store, CANDIDATE)
    assert candidate is not None and candidate.channel == "candidate" and candidate.promotion.receipts == 1
    assert candidate.manifest != stable_before.manifest
    assert read_pointer(store, STABLE)[0].manifest == stable_before.manifest  # stable did not move

    waits = _report(farm, _run(farm, "promote-candidates/promote-candidates", {}))
    assert "0 of 1 candidate(s) promoted" in waits and "**waits**" in waits and "0 of 1 ok receipts" in waits, waits
    assert read_pointer(store, STABLE)[0].manifest == stable_before.manifest

    record_receipt(store, CANDIDATE, lambda p, served: new_receipt(p, ok=True, error=None, load_ms=12.0, latency_ms=1.5,
                                                           by="a canary host", host=CANARY))
    run = _run(farm, "promote-candidates/promote-candidates", {})
    moved = _report(farm, run)
    assert "1 of 1 candidate(s) promoted" in moved and "**promoted**" in moved and "1 ok receipts" in moved, moved
    stable, _ = read_pointer(store, STABLE)
    assert stable.manifest == candidate.manifest and stable.current.action == "promote"
    assert stable.current.by == f"promote-candidates run {run.id}"
    assert stable.current.gates["canary"].startswith("holds: 1 ok receipts")
    # signed with the control worker's key: a serving host trusting it accepts the move
    trust = load_trusted_keys([farm.public_key], "TRTFARM_TRUSTED_KEYS")
    check_claim(store, STABLE, stable, read_stored(store, stable.manifest), trust)
    events = [(h.channel, h.event.action) for h in channel_history(store, "encoder")]
    assert events[-1] == ("stable", "promote") and ("candidate", "release") in events, events

    again = _report(farm, _run(farm, "promote-candidates/promote-candidates", {}))  # nothing left to move
    assert "0 of 1 candidate(s) promoted" in again and "**already**" in again, again


def test_a_failed_receipt_on_stable_rolls_it_back_and_emits_the_event_automations_page_on(farm):
    """After the promotion above: a serving host's failed receipt (the command line, with the farm's Prefect API)
    moves stable back and the server holds a ``trtfarm.release.rolled-back`` event naming the release."""
    import httpx

    store = open_store(farm.env["TRTFARM_STORE"])
    promoted, _ = read_pointer(store, STABLE)
    assert promoted.current.action == "promote"
    serving_host = {"PYTHONPATH": f"{REPO / 'tests' / 'fake_nvml'}{os.pathsep}{REPO}",  # an RTX 4090 host's NVML
                    "FAKE_NVML_GPUS": "NVIDIA GeForce RTX 4090:8.9:24.0"}
    done = farm.run([*TRTFARM, "receipt", "encoder", "--target", "rtx-4090-rtx1.7", "--failed", "CUDA error 700",
                     "--plan", promoted.plan_sha256, "--json"], env=serving_host)
    assert json.loads(done.stdout)["rolled_back_to"], done.stdout
    back, _ = read_pointer(store, STABLE)
    assert back.manifest != promoted.manifest and back.current.action == "rollback"

    def events():
        r = httpx.post(f"{farm.api}/events/filter", json={"filter": {"event": {"name": [
            "trtfarm.release.rolled-back"]}}, "limit": 10}, timeout=30)
        r.raise_for_status()
        return r.json()["events"]

    wait_for(lambda: events(), 60, "the rolled-back event")
    [event] = events()
    assert event["resource"]["prefect.resource.id"] == "trtfarm.release.encoder/rtx-4090/tensorrt_rtx-1.7.1.116"
    assert event["payload"]["error"] == "CUDA error 700" and event["payload"]["to"] == back.manifest
