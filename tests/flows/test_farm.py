"""The farm for real: a `prefect server` on 127.0.0.1, pools from the fleet, deployments from prefect.yaml, one
`trtfarm worker` process per pool, moto's S3 server as the store, and real TensorRT-RTX builds in the children."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid

import pytest

from trtfarm import layout
from trtfarm.identity import sha256_file
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.publish import read_manifest
from trtfarm.signing.keys import key_hint, load_trusted_keys
from trtfarm.store import open_store

from ..call_counts import FOLDER as CALL_COUNTS
from ..call_counts import counted_in
from ..conftest import REPO
from ..farm_server import TRTFARM, Farm, processes_of_flow_run, started_runs, wait_for

pytestmark = pytest.mark.integration

FOUR_RTX_TARGETS_TWO_POOLS = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090, count: 2}
  rtx-4080: {nvml_name: "NVIDIA GeForce RTX 4080", compute_capability: "8.9", memory_gib: 16, pool: rtx-4090, count: 1}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090, count: 2}
  rtx-5080: {nvml_name: "NVIDIA GeForce RTX 5080", compute_capability: "12.0", memory_gib: 16, pool: rtx-5090}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx4080-rtx1.7, gpu: rtx-4080, toolchain: rtx-1.7, release_on: built}
  - {id: rtx-5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx5080-rtx1.7, gpu: rtx-5080, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 5}}
"""
POOL = {"rtx-4090-rtx1.7": "rtx-4090", "rtx4080-rtx1.7": "rtx-4090", "rtx-5090-rtx1.7": "rtx-5090",
        "rtx5080-rtx1.7": "rtx-5090"}
# Two builds: the portable class of the first three targets spans both pools and is built once, on the first pool
# with an online worker; the 5080's own settings make a second build that only its pool serves.
WORKER_IMAGE = "registry.test/trtfarm-worker:rtx-1.7.1.116@sha256:" + "5e" * 32
BUILT_ON = {"rtx-4090-rtx1.7": "rtx-4090", "rtx4080-rtx1.7": "rtx-4090", "rtx-5090-rtx1.7": "rtx-4090",
            "rtx5080-rtx1.7": "rtx-5090"}


@pytest.fixture(scope="module")
def farm(tmp_path_factory, s3_endpoint):
    """Server, pools, deployments and three workers (control + two GPU pools), shared by this module's tests."""
    import boto3
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path_factory.mktemp("farm")
    fleet = home / "gpu_targets.yaml"
    fleet.write_text(FOUR_RTX_TARGETS_TWO_POOLS)
    bucket = f"farm-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    from ..test_signing import key_pair

    counts = home / "calls"
    counts.mkdir()
    f = Farm(home, {"TRTFARM_STORE": f"s3://{bucket}/store", "TRTFARM_TARGETS": str(fleet),
                    # every worker signs what it publishes, and says which image it runs
                    "TRTFARM_SIGNING_KEY": str(key_pair(home, "farm")[0]), "TRTFARM_WORKER_IMAGE": WORKER_IMAGE,
                    # every process counts its open_store and load_fleet calls (tests/call_counts/sitecustomize.py)
                    "TRTFARM_COUNT_CALLS": str(counts),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(CALL_COUNTS), os.environ.get("PYTHONPATH")]))})
    f.counts = counts
    f.public_key = home / "farm.pub"
    try:
        f.start_server()
        f.synced = f.trtfarm_json("pools", "sync")
        f.deploy("build-matrix", "on-export", "refit", "rtx-4090", "rtx-5090")
        for pool in ("trtfarm-control", "rtx-4090", "rtx-5090"):
            f.start_worker(pool)
        with temporary_settings({PREFECT_API_URL: f.api}), get_client(sync_client=True) as c:
            wait_for(lambda: all(c.read_work_pool(p).status.value == "READY" for p in ("trtfarm-control", "rtx-4090",
                                                                                       "rtx-5090")),
                      180, "the three workers to come online")  # else a slow worker's pool would be skipped
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def client(farm):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: farm.api}), get_client(sync_client=True) as c:
        yield c


def _child_runs(client):
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-target"])))


def _kill_first_running_child(client, deadline: float) -> str:
    """SIGKILL the process of the first child run that is Running; returns the child's run id.

    As soon as the run is Running, not when its build task shows Running: task states reach the server as events,
    late, and a child's build takes well under a second here, so waiting for the task could miss every child.
    """
    while time.monotonic() < deadline:
        for run in [r for r in _child_runs(client) if r.state and r.state.is_running()]:
            pids = processes_of_flow_run(str(run.id))
            if pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return str(run.id)
        time.sleep(0.05)
    raise AssertionError("no child was Running in time")


def test_pools_sync_made_one_pool_per_gpu_pool_with_its_gpu_count(farm):
    queue = "queues tensorrt_rtx-1.7.1.116"
    assert {(r["pool"], r["declared"], r["action"]) for r in farm.synced} == {
        ("rtx-4090", f"process, limit 3, {queue}", "create"), ("rtx-5090", f"process, limit 3, {queue}", "create"),
        ("trtfarm-control", "process, limit 2", "create")}
    again = farm.trtfarm("pools", "sync", "--check", "--json")
    assert {r["action"] for r in json.loads(again.stdout)} == {"ok"} and again.returncode == 0


def test_a_matrix_over_two_pools_survives_a_killed_child_then_builds_nothing(farm, client, example_dir):
    pushed = farm.trtfarm_json("models", "push", str(example_dir))
    started = farm.trtfarm_json("farm", "run", "encoder")
    killed = _kill_first_running_child(client, time.monotonic() + 180)

    deadline = time.monotonic() + 300
    while not (parent := client.read_flow_run(started["flow_run_id"])).state.is_final():
        assert time.monotonic() < deadline, farm.log("worker-trtfarm-control")[-4000:]
        time.sleep(0.5)
    assert parent.state.is_completed(), parent.state.message

    children = {str(r.id): r for r in _child_runs(client)}
    assert children[killed].state.is_crashed()
    resubmitted = [r for r in children.values() if r.name.endswith("-2")]
    assert len(resubmitted) == 1 and resubmitted[0].state.is_completed()
    assert len(children) == 3  # one per build, plus the resubmission

    store = open_store(os.environ.get("TRTFARM_STORE") or farm.env["TRTFARM_STORE"])
    outcomes_key = next(k for k in store.list("reports/encoder/") if started["flow_run_id"] in k
                        and k.endswith("outcomes.json"))
    rows = {r["target"]: r for r in json.loads(store.get(outcomes_key).data)}
    assert {t: r["status"] for t, r in rows.items()} == dict.fromkeys(POOL, "built")
    manifests = {t: read_manifest(store, r["manifest"].split(f"{store.uri}/", 1)[1]) for t, r in rows.items()}
    for target, row in rows.items():
        m = manifests[target]
        child = children[m.build.flow_run_id]
        assert child.work_pool_name == BUILT_ON[target], f"{target} built on {child.work_pool_name}"
        assert m.model.source_uri == f"{pushed['uri']}/model.onnx"
        assert row["release"].startswith("released: releases/encoder/")
    # the portable class spans both pools and was built once: one child, one plan, published for all three targets
    portable = [manifests[t] for t in ("rtx-4090-rtx1.7", "rtx4080-rtx1.7", "rtx-5090-rtx1.7")]
    assert len({m.build.flow_run_id for m in portable}) == 1 and len({m.plan.sha256 for m in portable}) == 1
    assert {m.target.gpu for m in portable} == {"rtx-4090", "rtx-4080", "rtx-5090"}
    assert manifests["rtx5080-rtx1.7"].build.build_digest != portable[0].build.build_digest

    # the run's report as Prefect artifacts: one table (target x status x build time x plan size x verification x
    # manifest) and the model's markdown report with links to the manifests
    from uuid import UUID

    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId

    of_run = FlowRunFilter(id=FlowRunFilterId(any_=[UUID(started["flow_run_id"])]))
    artifacts = {a.key: a for a in client.read_artifacts(flow_run_filter=of_run, artifact_filter=ArtifactFilter(
        key=ArtifactFilterKey(any_=["build-matrix", "build-matrix-encoder-report"])))}
    table = artifacts["build-matrix"].data
    table = json.loads(table) if isinstance(table, str) else table
    assert {r["target"]: r["status"] for r in table} == dict.fromkeys(POOL, "built")
    assert all(r["manifest"].startswith(f"{store.uri}/plans/encoder/") and r["plan_MiB"] and r["build_s"]
               and "built=passed" in r["verification"] for r in table)
    assert "[manifest.json](s3://" in artifacts["build-matrix-encoder-report"].data

    # no partial plan or manifest: every plan folder holds exactly a plan, its manifest, the manifest's provenance
    # and signature (the loser of a race leaves none of its own), and they agree
    prefixes: dict[str, set[str]] = {}
    for key in store.list("plans/"):
        prefixes.setdefault(key.rsplit("/", 1)[0], set()).add(key.rsplit("/", 1)[1])
    trust = load_trusted_keys([farm.public_key], "TRTFARM_TRUSTED_KEYS")
    assert len(prefixes) == 4
    for prefix, files in prefixes.items():
        stored = read_stored(store, f"{prefix}/manifest.json")
        m, sha = stored.manifest, stored.manifest_sha256
        assert files == {"model.plan", "manifest.json", layout.provenance_name(sha), layout.signature_name(sha)}
        store.download_file(f"{prefix}/model.plan", farm.home / "check.plan", sha256=m.plan.sha256)
        assert sha256_file(farm.home / "check.plan") == m.plan.sha256
        assert stored.verdict(trust, sha256_file(farm.home / "check.plan")).ok is True  # signed by the workers' key
        _assert_provenance_names_the_worker(json.loads(stored.provenance), m, BUILT_ON[m.target.target_id])
    pulled = farm.run([*TRTFARM, "pull", "encoder", "--gpu", "rtx-5090", "--toolchain", "tensorrt_rtx-1.7.1.116",
                       "--to", str(farm.home / "host" / "encoder.plan")], check=False,
                      env={"TRTFARM_TRUSTED_KEYS": str(farm.public_key)})
    assert pulled.returncode == 0 and "signature: signed by trusted key" in pulled.stdout, pulled.stderr
    # the run recorded the model's state in the store: a cold view on another host (a cache of its own) reads that
    # one object and says nothing was recomputed; it tells what the objects tell
    assert store.exists(layout.state_key("encoder"))
    viewed = farm.run([*TRTFARM, "status", "--json"], check=False, env={"XDG_CACHE_HOME": str(farm.home / "viewer")})
    assert viewed.returncode == 0 and "note:" not in viewed.stderr, viewed.stderr
    assert {c["target"]: c["state"] for c in json.loads(viewed.stdout)} == dict.fromkeys(POOL, "released")
    import boto3

    bucket = store.uri.split("/")[2]
    assert not boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads")

    rerun = farm.trtfarm_json("farm", "run", "encoder", "--wait")
    assert rerun["state"] == "COMPLETED"
    assert {r["status"] for r in rerun["outcomes"]} == {"up-to-date"} and len(rerun["outcomes"]) == 4
    assert len(_child_runs(client)) == 3  # nothing was dispatched


def _assert_provenance_names_the_worker(doc: dict, m, pool: str) -> None:
    """The farm child's provenance: its worker and image, and inputs that match the manifest."""
    build, run = doc["predicate"]["buildDefinition"], doc["predicate"]["runDetails"]
    ext, internal = build["externalParameters"], build["internalParameters"]
    assert doc["subject"][0]["digest"] == {"sha256": m.plan.sha256}
    assert internal["worker"]["name"] == f"test-{pool}" and internal["worker"]["pool"] == pool
    assert internal["worker"]["image"] == WORKER_IMAGE and internal["worker"]["image_digest"] == "sha256:" + "5e" * 32
    assert run["builder"]["id"] == f"urn:trtfarm:worker:{pool}/test-{pool}"
    assert run["metadata"]["invocationId"] == m.build.flow_run_id
    assert (ext["onnx_digest"], ext["source_uri"], internal["build_digest"]) == \
        (m.model.onnx_digest, m.model.source_uri, m.build.build_digest)
    assert ext["precision"]["converted_onnx_digest"] == m.precision.converted_onnx_digest
    assert [(d["name"], d["digest"]["sha256"]) for d in build["resolvedDependencies"]] == \
        [(f.name, f.sha256) for f in m.model.files]
    assert internal["toolchain"]["version"] == m.target.toolchain_version


def test_a_farm_run_opens_the_store_and_reads_the_fleet_once_in_the_parent_and_each_child(farm, client, tmp_path):
    """The parent flow's process opens the store and reads the run's fleet file once; each child opens the store
    once and reads no fleet file (its job carries what it needs; its worker's key comes from TRTFARM_SIGNING_KEY)."""
    from ..fleet_store import encoder_export

    farm.trtfarm_json("models", "push", str(encoder_export(tmp_path / "counted", 7, name="counted")))
    done = farm.trtfarm_json("farm", "run", "counted", "--wait")
    assert done["state"] == "COMPLETED" and {r["status"] for r in done["outcomes"]} == {"built"}, done
    store = open_store(farm.env["TRTFARM_STORE"])
    children = {read_manifest(store, r["manifest"].split(f"{store.uri}/", 1)[1]).build.flow_run_id
                for r in done["outcomes"]}
    assert len(children) == 2  # the portable class and the 5080's own build
    run = (farm.env["TRTFARM_STORE"], farm.env["TRTFARM_TARGETS"])
    counts, lines = counted_in(farm.counts, done["flow_run_id"], *run)
    assert counts == {"open_store": 1, "load_fleet": 1}, lines
    for child in children:
        counts, lines = counted_in(farm.counts, child, *run)
        assert counts == {"open_store": 1} and "load_fleet" not in lines, lines
    key = key_hint(farm.public_key.read_bytes())
    for r in done["outcomes"]:  # the worker's key signed each build; the run's key (the same here) is stated too
        stored = read_stored(store, r["manifest"].split(f"{store.uri}/", 1)[1])
        signing = json.loads(stored.provenance)["predicate"]["buildDefinition"]["internalParameters"]["signing"]
        assert signing == {"signed_by_worker": key, "release_key": key}


def test_an_fp16_model_on_the_farm_runs_its_precision_step_as_a_child_before_its_builds(farm, client, tmp_path):
    """The precision step is a job: a build-target child on the first target's pool converts and gates the model,
    then the parent plans the builds again from the step's record, so the builds carry the converted ONNX."""
    from ..fleet_store import encoder_export

    export = encoder_export(tmp_path / "halved", 11, name="halved")
    (export / "farm.yaml").write_text((export / "farm.yaml").read_text().replace("precision: fp32",
                                                                                 "precision: fp16"))
    farm.trtfarm_json("models", "push", str(export))
    done = farm.trtfarm_json("farm", "run", "halved", "--wait")
    assert done["state"] == "COMPLETED" and {r["status"] for r in done["outcomes"]} == {"built"}, done
    store = open_store(farm.env["TRTFARM_STORE"])
    manifests = [read_manifest(store, r["manifest"].split(f"{store.uri}/", 1)[1]) for r in done["outcomes"]]
    assert {m.precision.recipe for m in manifests} == {"fp16"}
    assert {m.precision.converted_onnx_digest for m in manifests} != {manifests[0].model.onnx_digest}
    steps = [r for r in _child_runs(client) if r.name.startswith("halved-precision-fp16")]
    assert len(steps) == 1 and steps[0].state.is_completed(), [(r.name, r.state) for r in steps]
    builds = {m.build.flow_run_id for m in manifests}
    assert str(steps[0].id) not in builds and len(builds) == 2  # the step ran before, in a child of its own
    again = farm.trtfarm_json("farm", "run", "halved", "--wait")
    assert {r["status"] for r in again["outcomes"]} == {"up-to-date"}, again  # the step's record is read, not rerun
    assert len([r for r in _child_runs(client) if r.name.startswith("halved-precision-fp16")]) == 1


def test_a_local_build_with_record_runs_the_same_flow_on_the_configured_server(farm, client, example_dir, tmp_path):
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    def matrix_runs():
        return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-matrix"])))

    before = {r.id for r in matrix_runs()}
    store = tmp_path / "recorded-store"
    rows = farm.trtfarm_json("build", str(example_dir / "model.onnx"), "--record", "--store", str(store),
                             "--target", "rtx-4090-rtx1.7")
    assert [(r["target"], r["status"]) for r in rows] == [("rtx-4090-rtx1.7", "built")]
    new = [r for r in matrix_runs() if r.id not in before]
    assert len(new) == 1 and new[0].state.is_completed() and new[0].deployment_id is None  # in-process, recorded
    assert any(str(new[0].id) in k for k in open_store(str(store)).list("reports/encoder/"))


def test_build_record_signs_builds_and_releases_with_the_key_its_fleet_file_names(farm, example_dir, tmp_path):
    """`build --record --targets-file X`: X names k2, the default fleet k1; the run's fleet file decides both."""
    from trtfarm.publishing.release import read_pointer
    from trtfarm.signing.release_claim import verify_release

    from ..test_signing import key_pair

    (k1, p1), (k2, p2) = key_pair(tmp_path, "k1"), key_pair(tmp_path, "k2")
    default, run_fleet = tmp_path / "default.yaml", tmp_path / "run.yaml"
    default.write_text(FOUR_RTX_TARGETS_TWO_POOLS + f"signing:\n  key: {k1}\n")
    run_fleet.write_text(FOUR_RTX_TARGETS_TWO_POOLS + f"signing:\n  key: {k2}\n")
    uri = (tmp_path / "two-keys").as_uri()
    done = farm.run([*TRTFARM, "build", str(example_dir / "model.onnx"), "--record", "--store", uri, "--target",
                     "rtx-4090-rtx1.7", "--targets-file", str(run_fleet), "--json"],
                    env={"TRTFARM_SIGNING_KEY": "", "TRTFARM_TARGETS": str(default)})
    [row] = json.loads(done.stdout)
    store = open_store(uri)
    stored = read_stored(store, row["manifest"].removeprefix(store.uri + "/"))
    signing = json.loads(stored.provenance)["predicate"]["buildDefinition"]["internalParameters"]["signing"]
    assert signing == {"signed_by_worker": key_hint(p2.read_bytes()), "release_key": key_hint(p2.read_bytes())}
    assert stored.verdict(load_trusted_keys([p2], "k2")).ok is True
    assert stored.verdict(load_trusted_keys([p1], "k1")).ok is not True
    pointer, _ = read_pointer(store, layout.release_key("encoder", "rtx-4090", "tensorrt_rtx-1.7.1.116"))
    _, claim = verify_release(pointer.claim, load_trusted_keys([p2], "k2"))
    assert claim.manifest == stored.manifest_key


def test_a_worker_for_a_pool_its_machine_does_not_match_refuses_to_start(farm, client):
    refused = farm.run([sys.executable, "-m", "trtfarm", "worker", "--pool", "gpu-h100", "--targets-file",
                        str(REPO / "gpu_targets.yaml")], check=False)
    assert refused.returncode == 3
    assert "refusing to serve pool 'gpu-h100'" in refused.stderr and "NVIDIA H100 80GB HBM3" in refused.stderr
    unknown = farm.run([sys.executable, "-m", "trtfarm", "worker", "--pool", "gpu-a100"], check=False)
    assert unknown.returncode == 3 and "no target uses pool 'gpu-a100'" in unknown.stderr
    assert {w.name for w in client.read_workers_for_work_pool("rtx-4090")} == {"test-rtx-4090"}


def test_invalid_parameters_are_rejected_before_any_run_starts(farm, client):
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    before = started_runs(client)
    with temporary_settings({PREFECT_API_URL: farm.api}):
        for bad in ({"precision": "fp17"}, {"targets": ["h100-trt99"]}):
            with pytest.raises(Exception, match="[Vv]alidation|fp17|h100-trt99"):
                run_deployment("build-matrix/build-matrix", parameters={"request": {"model": "encoder", **bad}},
                               timeout=0)
    cli = farm.trtfarm("farm", "run", "encoder", "--target", "h100-trt99", check=False)
    assert cli.returncode == 2 and "unknown target(s) ['h100-trt99']" in cli.stderr and "rtx-4090-rtx1.7" in cli.stderr
    assert started_runs(client) == before



def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _on_export_runs(client):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    return client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["on-export"])))


def test_an_onnx_landing_in_s3_starts_exactly_one_matrix_run_and_bad_requests_start_nothing(farm, client, tmp_path):
    import boto3

    from trtfarm.triggers.webhook import sign

    from ..conftest import make_model
    from ..farm_server import TRTFARM, free_port

    port, secret = free_port(), "webhook-secret"
    sns, s3 = boto3.client("sns"), boto3.client("s3")
    topic = sns.create_topic(Name=f"exports-{uuid.uuid4().hex[:6]}")["TopicArn"]
    # moto's server mode cannot serve SNS signing certificates (it routes that path by host only, in-process), so
    # this receiver skips the SNS signature check; tests/test_webhook.py checks real RSA signatures.
    bucket = f"exports-{uuid.uuid4().hex[:6]}"  # where the training pipeline drops exports: an allowed root
    farm.spawn("webhook", [*TRTFARM, "webhook", "serve", "--port", str(port), "--topic", topic, "--no-sns-verify",
                           "--replay-window", "30", "--max-body", "4096", "--allow-root", f"s3://{bucket}"],
               env={"TRTFARM_WEBHOOK_SECRET": secret})
    base = f"http://127.0.0.1:{port}"
    farm.wait_http(f"{base}/healthz")
    sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=f"{base}/sns")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"TopicConfigurations": [
        {"TopicArn": topic, "Events": ["s3:ObjectCreated:*"]}]})

    # a training pipeline drops an export: farm.yaml first, then the model as a multipart upload (two S3 events)
    key = "team-a/encoder/model.onnx"
    spec = (REPO / "examples/encoder/farm.yaml").read_bytes()
    s3.put_object(Bucket=bucket, Key="team-a/encoder/farm.yaml", Body=spec)
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1,
                          Body=make_model.encoder_model(11).SerializeToString(deterministic=True))
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                 MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
    run = wait_for(lambda: [r for r in _on_export_runs(client) if r.state.is_final()], 240,
                    "the on-export run to finish")[0]
    assert run.state.is_completed(), run.state.message
    assert run.parameters["request"]["model"] == f"s3://{bucket}/team-a/encoder"

    store = open_store(farm.env["TRTFARM_STORE"])
    outcomes_key = next(k for k in store.list("reports/encoder/") if str(run.id) in k and k.endswith("outcomes.json"))
    rows = json.loads(store.get(outcomes_key).data)
    assert {r["target"]: r["status"] for r in rows} == dict.fromkeys(POOL, "built")
    m = read_manifest(store, rows[0]["manifest"].split(f"{store.uri}/", 1)[1])
    assert m.model.source_uri == f"s3://{bucket}/{key}"

    # a correctly signed post for the same export is a duplicate; bad requests are refused and trigger nothing
    body = json.dumps({"model_uri": f"s3://{bucket}/team-a/encoder/"}).encode()
    now = str(int(time.time()))
    assert _post(f"{base}/hook", body, {"X-Trtfarm-Timestamp": now,
                                         "X-Trtfarm-Signature": sign(secret, now, body)}) == (
        200, {"triggered": [], "duplicates": [f"s3://{bucket}/team-a/encoder"]})
    old = str(int(time.time()) - 120)
    cases = [
        ("forged", f"{base}/hook", body, {"X-Trtfarm-Timestamp": now, "X-Trtfarm-Signature": sign("guess", now, body)},
         401),
        ("replayed", f"{base}/hook", body, {"X-Trtfarm-Timestamp": old, "X-Trtfarm-Signature": sign(secret, old, body)},
         401),
        ("malformed", f"{base}/hook", b"{oops", {"X-Trtfarm-Timestamp": now,
                                                  "X-Trtfarm-Signature": sign(secret, now, b"{oops")}, 400),
        ("oversized", f"{base}/hook", b"x" * 5000, {}, 413),
        ("unknown topic", f"{base}/sns", json.dumps({"Type": "Notification", "TopicArn": topic + "-x",
                                                      "Message": "{}"}).encode(), {}, 403),
    ]
    for what, url, data, headers, status in cases:
        got, answer = _post(url, data, headers)
        assert got == status, (what, answer)
    time.sleep(3)  # anything triggered would have reached the server by now
    assert len(_on_export_runs(client)) == 1
    claims = [k for k in store.list("webhook/exports/")]
    assert len(claims) == 1


def test_a_pool_without_workers_is_skipped_an_overdue_child_cancelled_and_cancelling_the_parent_cancels_children(
        farm, client):
    from prefect.states import Cancelling

    worker = farm.procs["worker-rtx-5090"]  # this pool loses its only worker
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    wait_for(lambda: client.read_work_pool("rtx-5090").status.value == "NOT_READY", 60, "the pool to be NOT_READY")
    skipped = farm.trtfarm_json("farm", "run", "encoder", "--force", "--wait")
    rows = {r["target"]: r for r in skipped["outcomes"]}
    # the portable class goes to the pool that still has a worker; the 5080's own build has nowhere to go
    assert {t: rows[t]["status"] for t in POOL} == {"rtx-4090-rtx1.7": "built", "rtx4080-rtx1.7": "built",
                                                    "rtx-5090-rtx1.7": "built", "rtx5080-rtx1.7": "skipped"}
    assert "built on rtx-4090" in rows["rtx-5090-rtx1.7"]["reason"]
    assert "no worker is online for pool rtx-5090" in rows["rtx5080-rtx1.7"]["reason"]
    assert "trtfarm worker --pool rtx-5090" in rows["rtx5080-rtx1.7"]["reason"]
    assert "--wait-for-workers" in rows["rtx5080-rtx1.7"]["reason"]

    # queued anyway (wait_for_workers): nobody picks the child up, so it overruns its timeout and is cancelled. Only
    # the unserved target: the timeout applies to every child, and a served one may need more than 10 s on a busy CI
    timed = farm.trtfarm_json("farm", "run", "encoder", "--target", "rtx5080-rtx1.7", "--force",
                              "--wait-for-workers", "--child-timeout", "10", "--wait")
    rows = {r["target"]: r for r in timed["outcomes"]}
    assert {t: r["status"] for t, r in rows.items()} == {"rtx5080-rtx1.7": "failed"}
    assert "no result within 10 s (child_timeout_s)" in rows["rtx5080-rtx1.7"]["reason"]
    overdue = [r for r in _child_runs(client) if r.work_pool_name == "rtx-5090" and r.parent_task_run_id
               and str(client.read_task_run(r.parent_task_run_id).flow_run_id) == timed["flow_run_id"]]
    assert len(overdue) == 1 and overdue[0].state.type.value in ("CANCELLING", "CANCELLED")

    started = farm.trtfarm_json("farm", "run", "encoder", "--force", "--wait-for-workers")
    def children_of_started():
        return [r for r in _child_runs(client) if r.work_pool_name == "rtx-5090" and r.state.is_scheduled()
                and str(client.read_task_run(r.parent_task_run_id).flow_run_id) == started["flow_run_id"]]

    child = wait_for(children_of_started, 120, "the parent to dispatch its children")[0]
    client.set_flow_run_state(started["flow_run_id"], Cancelling(message="test cancels the parent"), force=True)
    wait_for(lambda: client.read_flow_run(child.id).state.type.value in ("CANCELLING", "CANCELLED"), 60,
              "the cancellation to reach the child")
