"""Precision with real ModelOpt, Polygraphy and onnxruntime on CPU, and real TensorRT-RTX builds of the results."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from trtfarm.errors import UserInputError
from trtfarm.identity import sha256_file
from trtfarm.precision.step import ConversionError, GateFailed, Recipe, convert_and_gate, prepare_precision
from trtfarm.profiles.profile import profile_from_args
from trtfarm.store import open_store
from trtfarm.toolchain import import_flavour, plan_from_onnx
from trtfarm.vocabulary.fleet import BuilderSettings

from ..conftest import ENCODER_PROFILE

pytestmark = pytest.mark.integration


def rtx_build(path, tmp_path):
    return plan_from_onnx(import_flavour("tensorrt_rtx"), "tensorrt_rtx", path, [profile_from_args(ENCODER_PROFILE)],
                          BuilderSettings(), tmp_path / "model.plan")


def test_example_encoder_fp16_passes_the_gate_and_builds(example_onnx, tmp_path):
    result = convert_and_gate(example_onnx, Recipe(mode="fp16", task="embedding"), tmp_path / "fp16.onnx")
    (fig,) = result.report.figures
    assert result.report.passed and fig.cosine_mean >= 0.9999 and fig.extra["recall_at_10"] >= 0.9
    types = {i.data_type for i in onnx.load(str(result.path)).graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types
    assert rtx_build(result.path, tmp_path).plan_bytes > 0


def test_int8_with_calibration_has_qdq_is_gated_and_builds(example_onnx, encoder_calib, tmp_path):
    before = sha256_file(example_onnx)
    result = convert_and_gate(example_onnx, Recipe(mode="int8", task="embedding"), tmp_path / "int8.onnx",
                              calibration=encoder_calib)
    ops = [n.op_type for n in onnx.load(str(result.path)).graph.node]
    assert ops.count("QuantizeLinear") > 0 and ops.count("DequantizeLinear") > 0
    assert result.report.passed and result.report.figures[0].cosine_mean > 0.995
    assert sha256_file(example_onnx) == before  # ModelOpt's quantize rewrites its input: we give it a copy
    assert rtx_build(result.path, tmp_path).plan_bytes > 0


def test_bf16_is_checked_structurally_and_says_its_numerics_were_not_verified(example_onnx, tmp_path):
    result = convert_and_gate(example_onnx, Recipe(mode="bf16"), tmp_path / "bf16.onnx")
    assert result.report.passed is None and "BF16 numerics not verified here" in result.report.note


def test_naive_fp16_of_an_overflowing_model_fails_naming_the_node(overflow_model, tmp_path):
    model, heldout = overflow_model
    naive = Recipe(mode="fp16", data_max=float("inf"), task="classifier")
    result = convert_and_gate(model, naive, tmp_path / "naive.onnx", heldout=heldout)
    assert result.report.passed is False
    assert result.report.diverging_nodes[0]["node"] == "fc2" and "FP16 overflow" in result.summary()


def test_auto_pin_keeps_only_the_nodes_that_need_fp32(overflow_model, tmp_path):
    model, heldout = overflow_model
    pinned = convert_and_gate(model, Recipe(mode="fp16", auto_pin=True, task="classifier"), tmp_path / "p.onnx",
                              heldout=heldout)
    assert pinned.report.passed and pinned.pinned == ["fc2", "rescale"]
    default = convert_and_gate(model, Recipe(mode="fp16", task="classifier"), tmp_path / "d.onnx", heldout=heldout)
    fp16_nodes = {n.name for n in onnx.load(str(pinned.path)).graph.node if n.op_type != "Cast"} - {"fc2", "rescale"}
    assert default.report.passed and fp16_nodes == {"fc1", "relu1", "relu2", "head"}


@pytest.mark.parametrize("bad, message", [
    ({"input_id": np.zeros((4, 8), np.int64), "attention_mask": np.ones((4, 8), np.int64)}, "unknown: ['input_id']"),
    ({"input_ids": np.zeros((4,), np.int64), "attention_mask": np.ones((4, 8), np.int64)}, "the model takes rank 2"),
])
def test_calibration_data_with_wrong_names_or_shapes_is_refused(example_onnx, tmp_path, bad, message):
    np.savez(tmp_path / "calib.npz", **bad)
    with pytest.raises(UserInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        convert_and_gate(example_onnx, Recipe(mode="int8"), tmp_path / "o.onnx", calibration=tmp_path / "calib.npz")
    assert not (tmp_path / "o.onnx").exists()


def test_int8_without_calibration_and_a_corrupt_model_are_clear_errors(example_onnx, tmp_path):
    with pytest.raises(ConversionError, match="needs calibration data"):
        convert_and_gate(example_onnx, Recipe(mode="int8"), tmp_path / "o.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(example_onnx.read_bytes()[:2000])
    with pytest.raises(ConversionError, match="not a valid ONNX model"):
        convert_and_gate(bad, Recipe(mode="fp16"), tmp_path / "o.onnx")


def test_the_same_recipe_on_the_same_export_is_converted_once(example_onnx, tmp_path):
    from trtfarm.identity import onnx_digest

    store = open_store((tmp_path / "store").as_uri())
    digest, recipe = onnx_digest(example_onnx), Recipe(mode="fp16")
    first = prepare_precision(store, "encoder", example_onnx, digest, recipe, tmp_path / "w1")
    second = prepare_precision(store, "encoder", example_onnx, digest, recipe, tmp_path / "w2")
    assert not first.reused and second.reused and first.digest == second.digest
    assert sha256_file(second.path) == sha256_file(first.path)
    assert len([k for k in store.list("converted/") if k.endswith("model.onnx")]) == 1


def test_a_worker_beaten_to_the_upload_records_and_uses_the_stored_bytes(example_onnx, tmp_path):
    """Two workers convert one step; the other's model.onnx lands first: this one's record is of those bytes."""
    from trtfarm.identity import onnx_digest
    from trtfarm.layout import converted_prefix
    from trtfarm.precision.step import precision_key

    store = open_store((tmp_path / "store").as_uri())
    digest, recipe = onnx_digest(example_onnx), Recipe(mode="fp16")
    prefix = converted_prefix("encoder", digest, precision_key(recipe, digest, None, None))
    other = tmp_path / "other.onnx"  # bytes unlike this worker's conversion
    other.write_bytes(example_onnx.read_bytes())
    store.upload_file(f"{prefix}/model.onnx", other)  # its report.json is not written yet
    mine = prepare_precision(store, "encoder", example_onnx, digest, recipe, tmp_path / "w")
    stored = json.loads(store.get(f"{prefix}/report.json").data)
    assert sha256_file(mine.path) == sha256_file(other) == stored["sha256"]
    assert mine.digest == stored["digest"] == onnx_digest(other)


def test_a_failing_gate_is_stored_and_refuses_again_without_converting(overflow_model, tmp_path):
    from trtfarm.identity import onnx_digest

    model, heldout = overflow_model
    store = open_store((tmp_path / "store").as_uri())
    naive = Recipe(mode="fp16", data_max=float("inf"), task="classifier")
    for _ in range(2):
        with pytest.raises(GateFailed, match="fc2"):
            prepare_precision(store, "ovf", model, onnx_digest(model), naive, tmp_path / "w", heldout=heldout)
    keys = list(store.list("converted/"))
    assert len(keys) == 1 and keys[0].endswith("report.json")  # the report for diagnosis, no converted model
