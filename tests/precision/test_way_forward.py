"""A failed gate gives a way forward: the failing outputs, the layers that cost the most accuracy, and the command.

The model is a small MLP whose middle layer reads one activation channel scaled by 3000 (and its weights scaled
back): FP32 is exact, but INT8's per-tensor scale of that input is set by the one large channel, so every other
channel quantizes to zero and the output is lost. The costliest layer is the MatMul that reads it (``fc2``);
keeping it out of INT8 is enough.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.autopin import AutoPinFailed
from trtfarm.precision.step import Recipe, convert_and_gate

F = TensorProto.FLOAT


def outlier_mlp(folder):
    rng = np.random.default_rng(0)
    boost = np.ones(32, np.float32)
    boost[0] = 3000.0
    w2 = (rng.standard_normal((32, 32)) / 6).astype(np.float32)
    w2[0] /= 3000.0
    arrays = {"w1": (rng.standard_normal((16, 32)) / 4).astype(np.float32), "boost": boost, "w2": w2,
              "w3": (rng.standard_normal((32, 8)) / 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w1"], ["h1"], name="fc1"), n("Relu", ["h1"], ["a1"], name="relu1"),
             n("Mul", ["a1", "boost"], ["big"], name="outlier"), n("MatMul", ["big", "w2"], ["h2"], name="fc2"),
             n("Relu", ["h2"], ["a2"], name="relu2"), n("MatMul", ["a2", "w3"], ["y"], name="fc3")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, ["b", 16])],
                              [helper.make_tensor_value_info("y", F, ["b", 8])],
                              [numpy_helper.from_array(v, k) for k, v in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "m.onnx"))
    np.savez(folder / "calib.npz", x=np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32))
    return folder / "m.onnx", folder / "calib.npz"


def test_failed_int8_names_its_costliest_layer_and_the_command_that_fixes_it(tmp_path):
    model, calib = outlier_mlp(tmp_path)
    result = convert_and_gate(model, Recipe(mode="int8"), tmp_path / "q.onnx", calibration=calib)
    assert result.report.passed is False
    assert result.fix["failing_outputs"] == ["y"]
    assert result.fix["costliest_layers"][0] == "fc2"
    assert result.report.diverging_nodes[0]["cost"] > 0.5
    assert result.fix["auto_pin"] == f"trtfarm precision {model} --mode int8 --calibration {calib} --auto-pin"
    assert "--keep-fp32 '^(fc2" in result.fix["keep_fp32"]
    text = result.summary()
    assert "cost the most accuracy: fc2 (MatMul)" in text and result.fix["auto_pin"] in text
    assert result.to_json()["fix"] == result.fix


def test_auto_pin_on_int8_keeps_the_costly_layer_out_and_passes(tmp_path):
    model, calib = outlier_mlp(tmp_path)
    env = {**os.environ, "COLUMNS": "2000"}
    proc = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(model), "--mode", "int8",
                           "--calibration", str(calib), "--auto-pin", "--json", "--out", str(tmp_path / "p.onnx")],
                          env=env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["gate"]["verdict"] == "passed" and doc["pinned_fp32_nodes"] == ["fc2"]
    assert doc["fix"] is None
    pinned = onnx.load(str(tmp_path / "p.onnx"))
    producers = {t: node.op_type for node in pinned.graph.node for t in node.output}
    fc2 = next(node for node in pinned.graph.node if node.name == "fc2")
    assert "DequantizeLinear" not in {producers.get(i) for i in fc2.input}
    assert computes_in(pinned, "fc2") == TensorProto.FLOAT  # FP32, as the field's name says
    assert doc["nodes"]["fp32_nodes"]["fc2"] == "auto-pin: the gate fails without it"
    assert any("out of int8 quantization, in FP32" in n for n in doc["notes"]), doc["notes"]


def computes_in(model: onnx.ModelProto, name: str) -> int:
    """The element type ``name`` computes in: its output's and each float input's (one type, or an error)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    node = next(n for n in model.graph.node if n.name == name)
    (dtype,) = {types[t] for t in [*node.input, *node.output]}
    return dtype


def test_a_node_kept_out_of_int8_computes_in_fp32_where_modelopt_leaves_it_in_fp16(tmp_path):
    from modelopt.onnx.quantization import quantize

    from trtfarm.precision.step import calibration_feeds
    from trtfarm.precision.workarounds import modelopt_workarounds

    model, calib = outlier_mlp(tmp_path)
    recipe = Recipe(mode="int8", keep_fp32=["^fc2$"])
    result = convert_and_gate(model, recipe, tmp_path / "q.onnx", calibration=calib)
    assert recipe.keep_fp32 == ["^fc2$"]  # ModelOpt extends the list it is given: it was given a copy
    assert computes_in(onnx.load(str(tmp_path / "q.onnx")), "fc2") == TensorProto.FLOAT
    assert result.nodes.fp32_nodes == {"fc2": "pinned: matches --keep-fp32"}
    assert result.nodes.by_precision["int8"] >= 1 and result.report.verdict in ("passed", "failed")
    from onnxruntime.quantization import CalibrationDataReader

    from trtfarm.precision.convert import _Feeds  # the reader trtfarm hands ModelOpt

    reader = type("CalibrationFeeds", (_Feeds, CalibrationDataReader), {})(calibration_feeds(model, calib))
    own = tmp_path / "own.onnx"
    with modelopt_workarounds():  # the referee: ModelOpt's own output runs the excluded node in its FP16
        quantize(onnx_path=str(model), quantize_mode="int8", calibration_data_reader=reader, calibration_eps=["cpu"],
                 output_path=str(own), nodes_to_exclude=["^fc2$"], log_level="WARNING")
    assert computes_in(onnx.load(str(own)), "fc2") == TensorProto.FLOAT16


def test_int8_auto_pin_that_cannot_pass_says_int8_is_not_for_this_model(tmp_path):
    model, calib = outlier_mlp(tmp_path)
    strict = Recipe(mode="int8", auto_pin=True, thresholds={"cosine_min": 1.0, "cosine_mean": 1.0, "max_error": 0.0})
    with pytest.raises(AutoPinFailed, match="int8 is not for this model: .* still fails: output 'y'"):
        convert_and_gate(model, strict, tmp_path / "s.onnx", calibration=calib)


def test_an_overflow_in_a_node_the_conversion_added_is_named_by_the_model_s_own_layer(tmp_path):
    """A first layer whose FP32 output (about 5e5) is beyond FP16's range: INT8 overflows in the weight's
    DequantizeLinear that ModelOpt adds and in the layer's FP16 output. The costliest layers are the model's own
    (what --keep-fp32 and auto-pin can keep), each once; the issue says where the overflow was seen."""
    rng = np.random.default_rng(0)
    arrays = {"w1": (rng.standard_normal((16, 32)) * 3e4).astype(np.float32), "shrink": np.array(1e-4, np.float32),
              "w2": (rng.standard_normal((32, 8)) / 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w1"], ["h1"], name="fc1"), n("Relu", ["h1"], ["a1"], name="relu1"),
             n("Mul", ["a1", "shrink"], ["s1"], name="shrink"), n("MatMul", ["s1", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, ["b", 16])],
                              [helper.make_tensor_value_info("y", F, ["b", 8])],
                              [numpy_helper.from_array(v, k) for k, v in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32))
    result = convert_and_gate(tmp_path / "m.onnx", Recipe(mode="int8"), tmp_path / "q.onnx",
                              calibration=tmp_path / "calib.npz")
    converted = {node.name for node in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    assert any("DequantizeLinear" in f for f in result.report.failures)  # where ModelOpt's graph overflowed
    layers = result.fix["costliest_layers"]
    assert layers[0] == "fc1" and set(layers) <= {"fc1", "relu1", "shrink", "fc2"} < converted, layers
    assert len(layers) == len(set(layers))
    assert "which the conversion added" in result.report.diverging_nodes[0]["issue"]


def test_the_printed_commands_give_the_users_recipe_again():
    """A fix changes only what it fixes: the op types, AutoCast limit, task, ranges and error limit stay."""
    from pathlib import Path

    from trtfarm.precision.fixes import way_forward
    from trtfarm.precision.gate import GateReport
    from trtfarm.precision.recipe import Recipe

    recipe = Recipe.model_validate({"mode": "fp16", "keep_fp32": ["^head$"], "keep_fp32_ops": ["LayerNormalization"],
                                    "data_max": float("inf"), "task": "embedding", "output_ranges": {"y": [0, 1]},
                                    "thresholds": {"max_error": 0.02}})
    report = GateReport("fp16", False, {}, failures=["output 'y': x"],
                        diverging_nodes=[{"node": "fc2", "op": "MatMul", "issue": "", "cost": 1.0}])
    fix = way_forward(Path("m.onnx"), recipe, report, heldout=Path("h.npz"))
    options = ("--heldout h.npz --keep-fp32-op LayerNormalization --data-max inf --task embedding "
               "--output-range y=0:1 --max-error 0.02 --keep-fp32 '^head$'")
    assert fix["auto_pin"] == f"trtfarm precision m.onnx --mode fp16 {options} --auto-pin"
    assert fix["keep_fp32"] == f"trtfarm precision m.onnx --mode fp16 {options} --keep-fp32 '^(fc2)$'"
