"""The core pipeline of `trtfarm build` (no Prefect): real RTX builds against file:// and moto's S3."""

from __future__ import annotations

import pytest

from trtfarm.errors import UserInputError
from trtfarm.pipeline import run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.publish import read_manifest
from trtfarm.store import open_store

from .conftest import make_model

pytestmark = pytest.mark.integration  # moto's S3 server


def run(onnx, fleet_file, store, **kw):
    request = MatrixRequest(model=str(onnx), store=store, targets_file=str(fleet_file), dispatch="local", **kw)
    return {r.outcome.target: r.to_json() for r in run_local(request)}


def test_builds_every_rtx_target_once_per_class_then_everything_is_up_to_date(
        example_onnx, fleet_file, store_uri, tmp_path):
    first = run(example_onnx, fleet_file, store_uri)
    assert {t: r["status"] for t, r in first.items()} == {
        "rtx-4090-rtx1.7": "built", "rtx-5090-rtx1.7": "built", "rtx3090-rtx1.7-o5": "built", "h100-trt11.4": "skipped"}
    assert "`tensorrt` 11.4.0.106 is not installed here" in first["h100-trt11.4"]["reason"]
    assert "shares the rtx-portable build of rtx-4090-rtx1.7" in first["rtx-5090-rtx1.7"]["reason"]

    store = open_store(store_uri)
    manifests = {}
    for target in ("rtx-4090-rtx1.7", "rtx-5090-rtx1.7", "rtx3090-rtx1.7-o5"):
        key = first[target]["manifest"].split(f"{store.uri}/", 1)[1] if store.uri.startswith("s3") else \
            first[target]["manifest"].split("/store/", 1)[1]
        m = read_manifest(store, key)
        store.download_file(m.plan.key, tmp_path / f"{target}.plan", sha256=m.plan.sha256)  # refuses a mismatch
        assert m.target.target_id == target and m.model.name == "encoder"
        assert m.verification.engine.status == "pending" and m.target.gpu_name in m.verification.engine.detail
        assert m.verification.api.status == "not_run" and "TensorRT-RTX" in m.verification.api.detail
        assert m.build.timing_cache.used is False and m.build.timing_cache.key is None
        assert m.build.timing_cache.reason.startswith("none: TensorRT-RTX has no timing cache")
        assert m.build.profiles == [{n: {"min": [1, 16], "opt": [16, 128], "max": [32, 512]}
                                     for n in ("attention_mask", "input_ids")}]
        manifests[target] = m
    assert manifests["rtx-4090-rtx1.7"].build.build_digest == manifests["rtx-5090-rtx1.7"].build.build_digest
    assert manifests["rtx-4090-rtx1.7"].plan.sha256 == manifests["rtx-5090-rtx1.7"].plan.sha256
    assert manifests["rtx3090-rtx1.7-o5"].build.build_digest != manifests["rtx-4090-rtx1.7"].build.build_digest
    assert "--target rtx-4090-rtx1.7" in manifests["rtx-5090-rtx1.7"].build.reproduce

    reports = [k for k in store.list("reports/encoder/") if k.endswith("/report.md")]
    assert len(reports) == 1 and "| rtx-5090-rtx1.7 | built | pending on NVIDIA GeForce RTX 5090 |" in \
        store.get(reports[0]).data.decode()

    second = run(example_onnx, fleet_file, store_uri)
    assert {t: r["status"] for t, r in second.items() if t != "h100-trt11.4"} == {
        "rtx-4090-rtx1.7": "up-to-date", "rtx-5090-rtx1.7": "up-to-date", "rtx3090-rtx1.7-o5": "up-to-date"}
    assert len([k for k in store.list("plans/") if k.endswith("manifest.json")]) == 3


def test_new_weights_are_a_new_build(example_dir, fleet_file, tmp_path):
    store = (tmp_path / "store").as_uri()
    run(example_dir / "model.onnx", fleet_file, store, targets=["rtx-4090-rtx1.7"])
    other = tmp_path / "encoder" / "model.onnx"
    other.parent.mkdir()
    other.write_bytes(make_model.encoder_model(7).SerializeToString(deterministic=True))
    rows = run(other, fleet_file, store, targets=["rtx-4090-rtx1.7"],
               profiles=[{"input_ids": "1x16:16x128:32x512", "attention_mask": "1x16:16x128:32x512"}])
    assert rows["rtx-4090-rtx1.7"]["status"] == "built"


def test_a_profile_violating_the_model_is_refused_before_any_build_and_publishes_nothing(
        example_onnx, fleet_file, tmp_path):
    # TensorRT's builder refuses it too ("kOPT values are not self-consistent. Dimensions with name seq must be
    # equal"); the pre-check says so before any build, naming both inputs
    store = (tmp_path / "store").as_uri()
    bad = [{"input_ids": "1x16:16x128:32x512", "attention_mask": "1x16:16x64:32x512"}]
    with pytest.raises(UserInputError, match="dimension 1 and dimension 1 of input 'input_ids' are both named 'seq'"):
        run(example_onnx, fleet_file, store, profiles=bad)
    assert list(open_store(store).list("plans/")) == []


def test_a_corrupt_onnx_stops_the_run_before_any_build(example_onnx, fleet_file, tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(example_onnx.read_bytes()[:4000])
    store = (tmp_path / "store").as_uri()
    with pytest.raises(UserInputError, match="not a valid ONNX model"):
        run(bad, fleet_file, store, profiles=[{"input_ids": "1x16:1x16:1x16", "attention_mask": "1x16:1x16:1x16"}])
    assert list(open_store(store).list("")) == []


def test_shapes_log_beside_the_model_becomes_two_profiles_in_a_real_build(
        example_onnx, textbook_log, fleet_file, tmp_path):
    export = tmp_path / "encoder"
    export.mkdir()
    (export / "model.onnx").write_bytes(example_onnx.read_bytes())
    (export / "shapes.jsonl").write_bytes(textbook_log.read_bytes())
    store = (tmp_path / "store").as_uri()
    rows = run(export / "model.onnx", fleet_file, store, targets=["rtx-4090-rtx1.7"])
    assert rows["rtx-4090-rtx1.7"]["status"] == "built"
    m = read_manifest(open_store(store), rows["rtx-4090-rtx1.7"]["manifest"].split("/store/", 1)[1])
    assert [p["input_ids"] for p in m.build.profiles] == [
        {"min": [1, 16], "opt": [32, 64], "max": [32, 128]}, {"min": [1, 129], "opt": [8, 384], "max": [16, 512]}]


def test_fp16_recipe_is_converted_once_gated_and_built_for_every_rtx_target(
        example_onnx, fleet_file, tmp_path):
    store = (tmp_path / "store").as_uri()
    rows = run(example_onnx, fleet_file, store, precision="fp16")
    assert {r["status"] for t, r in rows.items() if t != "h100-trt11.4"} == {"built"}
    s = open_store(store)
    m = read_manifest(s, rows["rtx-5090-rtx1.7"]["manifest"].split("/store/", 1)[1])
    assert m.precision.recipe == "fp16" and m.precision.converted_onnx_digest != m.model.onnx_digest
    assert m.verification.onnx.status == "passed" and m.verification.onnx.figures["embeddings"]["cosine_mean"] > 0.9999
    assert "--precision fp16" in m.build.reproduce
    assert len([k for k in s.list("converted/") if k.endswith("model.onnx")]) == 1


def test_a_refused_recipe_stops_every_build_and_names_the_node(overflow_model, fleet_file, tmp_path):
    model, heldout = overflow_model
    export = tmp_path / "ovf"
    export.mkdir()
    (export / "model.onnx").write_bytes(model.read_bytes())
    (export / "heldout.npz").write_bytes(heldout.read_bytes())
    (export / "farm.yaml").write_text("name: ovf\nprecision: {mode: fp16, data_max: .inf, task: classifier}\n"
                                      "profiles:\n  - pixels: 1x64:8x64:16x64\n")
    store = (tmp_path / "store").as_uri()
    rows = run(export / "model.onnx", fleet_file, store)
    assert {r["status"] for r in rows.values()} == {"failed"}
    assert all("fc2 (MatMul): FP16 overflow" in r["reason"] for r in rows.values())
    assert list(open_store(store).list("plans/")) == []
