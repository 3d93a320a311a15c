"""State records on a copy of the store, and a promoted model's candidate channel kept in its record.

One store, built once: three models on one RTX target, ``encoder`` released to stable, ``encoder-soon`` and
``encoder-wait`` released to their candidate channel (promotion: declared; the first asks no receipts, the second
two). Each test copies it as an operator would (a folder copy that keeps modification times, one that does not, a
bucket-to-bucket copy on moto's S3 server) and counts what a cold ``status`` asks of the copy (tests/store_requests.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from trtfarm import layout
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.registry import register_export
from trtfarm.publishing.release import read_pointer
from trtfarm.releases.receipts import new_receipt, receipt_key
from trtfarm.state.recorder import record_states
from trtfarm.state.views import status
from trtfarm.store import open_store

from .fleet_store import build_all, encoder_export
from .fleets import ONE_RTX_TARGET
from .store_requests import CountingStore

TARGET = "rtx-4090-rtx1.7"
TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
PROMOTIONS = {"encoder": "", "encoder-soon": "promotion: {receipts: 0, soak_s: 0}\n",
              "encoder-wait": "promotion: {receipts: 2, soak_s: 0}\n"}
LISTINGS = 8  # the registry, plans, both channels' pointers, precision steps, runs, state records and receipts


@pytest.fixture(scope="module")
def promoted(tmp_path_factory):
    """The store (each model's state recorded by the run that built it) and its fleet file."""
    root = tmp_path_factory.mktemp("promoted")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    store = open_store((root / "store").as_uri())
    for seed, (model, promotion) in enumerate(PROMOTIONS.items()):
        export = encoder_export(root / model, seed, name=model)
        (export / "farm.yaml").write_text((export / "farm.yaml").read_text() + promotion)
        register_export(store, export)
    build_all(store.uri, fleet)
    return root / "store", fleet


def _cells(found) -> list[dict]:
    return [c.to_json() | {"age_s": None} for c in found.cells]


def _cold(uri: str, fleet):
    """A cold status of the store at ``uri`` (no summary cache), and the requests it made by method."""
    calls: Counter = Counter()
    found = status(CountingStore(open_store(uri), calls), fleet, cache=False)
    return found, dict(Counter(method for method, _ in calls))


def _truth(uri: str, fleet) -> list[dict]:
    """The cells computed from the store's objects alone (its state records set aside, then put back)."""
    store = open_store(uri)
    kept = {key: store.get(key).data for key in store.list("state/")}
    for key in kept:
        store.delete(key)
    cells = _cells(status(store, fleet, cache=False))
    for key, data in kept.items():
        store.put_if_absent(key, data)
    return cells


def test_a_promoted_models_record_keeps_its_candidate_channel_so_a_view_is_one_object_per_model(promoted, tmp_path):
    shutil.copytree(promoted[0], tmp_path / "store")
    uri, fleet = (tmp_path / "store").as_uri(), load_fleet(promoted[1])
    assert record_states(open_store(uri), fleet, by="test") == sorted(PROMOTIONS)
    truth = _truth(uri, fleet)
    found, asked = _cold(uri, fleet)
    assert _cells(found) == truth and found.notes == [], found.notes
    assert {c.model: c.candidate_verdict for c in found.cells} == {
        "encoder": None, "encoder-soon": "holds", "encoder-wait": "waits"}
    assert asked == {"list_versions": LISTINGS, "get": len(PROMOTIONS)}, asked
    # a receipt posted since: the receipts are what the gates count, so the record is no longer current
    pointer, _ = read_pointer(open_store(uri), layout.channel_key("encoder-wait", "rtx-4090", TOOLCHAIN, "candidate"))
    receipt = new_receipt(pointer, ok=False, error="CUDA error 700 on load", load_ms=None, latency_ms=None, by="test")
    open_store(uri).put_if_absent(receipt_key(receipt), receipt.model_dump_json().encode())
    after, asked = _cold(uri, fleet)
    assert any(n.startswith("1 of 3 models") for n in after.notes), after.notes
    assert asked["get"] > len(PROMOTIONS) and _cells(after) == _truth(uri, fleet)


def test_a_folder_copy_reads_the_records_and_a_copy_that_kept_no_times_says_so_once(promoted, tmp_path):
    fleet = load_fleet(promoted[1])
    original = _cold(promoted[0].as_uri(), fleet)[0]
    shutil.copytree(promoted[0], tmp_path / "copy")  # as cp -a: contents and modification times
    found, asked = _cold((tmp_path / "copy").as_uri(), fleet)
    assert asked == {"list_versions": LISTINGS, "get": len(PROMOTIONS)} and found.notes == [], (asked, found.notes)
    assert _cells(found) == _cells(original)
    done = subprocess.run([sys.executable, "-m", "trtfarm", "status", "--json", "--store", str(tmp_path / "copy"),
                           "--targets-file", str(promoted[1])], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0 and "note:" not in done.stderr, done.stderr
    shown = [c | {"reason": c["reason"].replace("`", "")} for c in _cells(original)]  # commands print unquoted
    assert [r | {"age_s": None} for r in json.loads(done.stdout)] == shown
    # a copy that kept the contents and not the times (cp -r, a tar restore): computed, and said once
    shutil.copytree(promoted[0], tmp_path / "plain", copy_function=shutil.copyfile)
    later = os.stat(tmp_path / "plain").st_mtime + 3600
    for folder, _, files in os.walk(tmp_path / "plain"):
        for name in files:
            os.utime(os.path.join(folder, name), (later, later))
    found, asked = _cold((tmp_path / "plain").as_uri(), fleet)
    assert [c.state for c in found.cells] == [c.state for c in original.cells]
    assert len(found.notes) == 1 and f"written in {promoted[0].as_uri()}" in found.notes[0], found.notes
    assert "`trtfarm status --record` records them for this copy" in found.notes[0]
    record_states(open_store((tmp_path / "plain").as_uri()), fleet, by="test")
    assert _cold((tmp_path / "plain").as_uri(), fleet)[1]["get"] == len(PROMOTIONS)


def test_a_change_made_to_a_copy_after_it_was_made_is_seen(promoted, tmp_path):
    fleet = load_fleet(promoted[1])
    shutil.copytree(promoted[0], tmp_path / "copy")
    store = open_store((tmp_path / "copy").as_uri())
    released = _cold(store.uri, fleet)[0].cell("encoder", TARGET)
    store.delete(layout.plan_key(layout.folder_of(released.manifest)))  # a plan deleted
    key = layout.channel_key("encoder-soon", "rtx-4090", TOOLCHAIN, "candidate")
    doc = json.loads(store.get(key).data)
    store.compare_and_swap(key, json.dumps({**doc, "manifest": released.manifest}).encode(), store.get(key).etag)
    found, _ = _cold(store.uri, fleet)
    gone = found.cell("encoder", TARGET)
    assert gone.state in ("refused", "damaged") and "model.plan" in gone.reason, gone
    assert found.cell("encoder-soon", TARGET).candidate_verdict == "damaged"  # a pointer moved to another model's


def test_a_bucket_copy_reads_the_records_and_a_plan_copied_in_parts_is_computed_once_and_said(promoted, s3_uri):
    import boto3

    fleet, source = load_fleet(promoted[1]), open_store(s3_uri)
    local = open_store(promoted[0].as_uri())
    for key in local.list(""):
        if not key.startswith("state/"):
            source.put_if_absent(key, local.get(key).data)
    record_states(source, fleet, by="test")  # recorded in the bucket, against its own ETags
    original = _cold(s3_uri, fleet)[0]
    client, bucket = boto3.client("s3"), s3_uri.split("/")[2]
    other = f"copy-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=other)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):  # as `aws s3 sync` copies
        for obj in page.get("Contents", []):
            client.copy_object(Bucket=other, Key=obj["Key"], CopySource={"Bucket": bucket, "Key": obj["Key"]})
    # a plan copied in parts (the AWS CLI copies 8 MiB parts above 8 MiB): its ETag is of the parts, not the MD5
    plan = "farm/" + layout.plan_key(layout.folder_of(original.cell("encoder-soon", TARGET).manifest))
    data = client.get_object(Bucket=other, Key=plan)["Body"].read()
    upload = client.create_multipart_upload(Bucket=other, Key=plan)["UploadId"]
    part = client.upload_part(Bucket=other, Key=plan, UploadId=upload, PartNumber=1, Body=data)["ETag"]
    client.complete_multipart_upload(Bucket=other, Key=plan, UploadId=upload,
                                     MultipartUpload={"Parts": [{"ETag": part, "PartNumber": 1}]})
    assert client.head_object(Bucket=other, Key=plan)["ETag"].endswith('-1"')
    found, asked = _cold(f"s3://{other}/farm", fleet)
    # every record is read; the model whose plan's ETag changed is computed from the store's records once, and the
    # view says so in one line (a plan rewritten in place with other bytes of its size changes its ETag the same way)
    assert asked["get"] > len(PROMOTIONS) and _cells(found) == _cells(original), asked
    assert len(found.notes) == 1 and f"1 of {len(PROMOTIONS)} models' state records were written in {s3_uri}" in \
        found.notes[0], found.notes
    record_states(open_store(f"s3://{other}/farm"), fleet, by="test")  # `trtfarm status --record` on the copy
    found, asked = _cold(f"s3://{other}/farm", fleet)
    assert asked == {"list_versions": LISTINGS, "get": len(PROMOTIONS)} and found.notes == [], (asked, found.notes)
    assert _cells(found) == _cells(original)
    copy = open_store(f"s3://{other}/farm")
    copy.delete(layout.plan_key(layout.folder_of(original.cell("encoder", TARGET).manifest)))
    gone = _cold(copy.uri, fleet)[0].cell("encoder", TARGET)
    assert gone.state in ("refused", "damaged") and "model.plan" in gone.reason, gone
