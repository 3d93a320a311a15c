"""The manifest schema: round trip, enum names, version handling."""

from __future__ import annotations

import json

import pytest

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import Manifest, TensorIO, manifest_from_json


def sample() -> Manifest:
    return Manifest.model_validate({
        "model": {"name": "enc", "source_uri": "file:///m.onnx", "onnx_digest": "a" * 64, "graph_digest": "b" * 64},
        "precision": {"converted_onnx_digest": "a" * 64},
        "target": {"target_id": "h100-trt11.4", "gpu": "h100", "gpu_name": "NVIDIA H100 80GB HBM3",
                   "compute_capability": "9.0", "compat_class": "h100", "flavour": "tensorrt",
                   "toolchain_version": "11.4.0.106", "hardware_compatibility_level": "SAME_COMPUTE_CAPABILITY",
                   "builder_flags": ["REFIT_IDENTICAL", "STRIP_PLAN"]},
        "build": {"build_digest": "c" * 64, "profiles": [], "settings": {}, "wall_s": 1.0,
                  "built_for_target": "h100-trt11.4", "timing_cache": {"used": False, "reason": "off"},
                  "worker_host": "w1", "reproduce": "trtfarm build m.onnx"},
        "plan": {"key": "plans/x/model.plan", "bytes": 10, "sha256": "d" * 64},
        "verification": {"onnx": {"status": "passed"}, "built": {"status": "passed"},
                         "engine": {"status": "pending", "detail": "engine: pending on NVIDIA H100 80GB HBM3"},
                         "api": {"status": "passed", "detail": "checked against the tensorrt 11.4.0.106 bindings"}},
    })


def test_round_trip_keeps_every_field_and_stores_enums_by_name():
    m = sample()
    doc = json.loads(m.to_json())
    assert doc["target"]["hardware_compatibility_level"] == "SAME_COMPUTE_CAPABILITY"
    assert doc["target"]["builder_flags"] == ["REFIT_IDENTICAL", "STRIP_PLAN"]
    assert doc["schema_version"] == 3
    assert manifest_from_json(m.to_json()) == m


def test_a_schema_2_manifest_upgrades_serving_its_one_gpu_with_its_ids_unknown():
    doc = json.loads(sample().to_json())
    doc["schema_version"] = 2
    for key in ("pci_ids", "serves", "mig"):
        del doc["target"][key]
    del doc["build"]["device"]
    m = manifest_from_json(json.dumps(doc))
    assert m.schema_version == 3 and m.target.pci_ids == [] and m.target.mig is None and m.build.device is None
    assert [(s.gpu, s.gpu_name, s.pci_ids) for s in m.target.serves] == [(m.target.gpu, m.target.gpu_name, [])]


def test_a_schema_1_manifest_upgrades_with_its_io_and_serving_images_unknown():
    doc = json.loads(sample().to_json())
    doc["schema_version"] = 1
    del doc["plan"]["io"], doc["target"]["serving_images"], doc["model"]["files"], doc["verification"]["api"]
    m = manifest_from_json(json.dumps(doc))
    assert m.schema_version == 3 and m.plan.io is None and m.target.serving_images == [] and m.model.files == []
    assert m.model == sample().model and m.plan.sha256 == "d" * 64
    assert m.verification.api.status == "not_run"
    assert "before trtfarm recorded the bindings API check" in m.verification.api.detail


def test_io_tensors_are_stored_with_dtype_names():
    m = sample()
    m.plan.io = [TensorIO(name="input_ids", mode="input", dtype="INT64", shape=[-1, -1])]
    assert manifest_from_json(m.to_json()) == m
    assert json.loads(m.to_json())["plan"]["io"] == [{"name": "input_ids", "mode": "input", "dtype": "INT64",
                                                       "shape": [-1, -1]}]


def test_newer_schema_is_refused_with_the_fix():
    doc = json.loads(sample().to_json())
    doc["schema_version"] = 99
    with pytest.raises(UserInputError, match="newer than this trtfarm.*upgrade trtfarm"):
        manifest_from_json(json.dumps(doc))


def test_not_json_is_a_clear_error():
    with pytest.raises(UserInputError, match="not a trtfarm manifest"):
        manifest_from_json(b"\x00garbage", "s3://b/k")


def test_same_build_compares_build_model_and_gpu():
    a, b = sample(), sample()
    assert a.same_build(b)
    b.target.gpu = "l4"
    assert not a.same_build(b)
