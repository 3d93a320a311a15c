"""A gate whose inputs carry no signal on an output does not pass: its verdict is ``not judged``.

The model has two outputs: ``score`` (a MatMul, signal on every sample) and ``dead`` (ReLU of a strongly negative
bias: zero on every generated input, so any conversion's error there is zero and says nothing).
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

from trtfarm.building.precision_runner import with_precision
from trtfarm.identity import onnx_digest
from trtfarm.layout import converted_prefix
from trtfarm.modelfile import model_source
from trtfarm.precision.step import Recipe, convert_and_gate, precision_key
from trtfarm.store import open_store

pytestmark = pytest.mark.integration


def two_outputs(path, bias: float) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.full(8, bias, np.float32), "b2")]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w1"], ["score"], name="head"), n("MatMul", ["x", "w2"], ["h"], name="fc"),
             n("Add", ["h", "b2"], ["hb"], name="bias"), n("Relu", ["hb"], ["dead"], name="relu")]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["b", 8]) for o in ("score", "dead")]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_an_output_without_signal_is_not_judged_and_a_normal_model_passes(tmp_path):
    dead, alive = tmp_path / "dead.onnx", tmp_path / "alive.onnx"
    two_outputs(dead, bias=-1000.0)
    two_outputs(alive, bias=0.0)

    ok = convert_and_gate(alive, Recipe(mode="fp16"), tmp_path / "alive16.onnx").report
    assert ok.passed is True and ok.verdict == "passed"

    report = convert_and_gate(dead, Recipe(mode="fp16"), tmp_path / "dead16.onnx").report
    assert report.passed is None and report.verdict == "not judged" and report.failures == []
    assert "'dead'" in report.note and "'score'" not in report.note and "--heldout" in report.note


def test_a_build_leaves_the_recipe_undecided_and_the_command_exits_4(tmp_path):
    path = tmp_path / "model.onnx"
    two_outputs(path, bias=-1000.0)
    store, recipe = open_store((tmp_path / "store").as_uri()), Recipe(mode="fp16")
    planned = with_precision(store, model_source(path, "dead", verify=False), recipe, None, None)
    assert planned.precision.gate == "not_run" and "not judged" in planned.precision.gate_detail
    prefix = converted_prefix("dead", onnx_digest(path), precision_key(recipe, onnx_digest(path), None, None))
    stored = json.loads(store.get(f"{prefix}/report.json").data)["report"]
    assert stored["verdict"] == "not judged" and stored["passed"] is None  # no passing record to reuse

    env = {**os.environ, "COLUMNS": "2000"}
    proc = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(path), "--mode", "fp16", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    gate = json.loads(proc.stdout)["gate"]
    assert gate["verdict"] == "not judged" and "'dead'" in gate["note"] and "--heldout" in gate["note"]


def deaf(path, weight: float) -> None:
    """``y = x @ (weight * ones) + b`` [b, 8]: with weight 0 every sample gives ``b``, which varies along the row.

    The character of the ONNX model zoo's densenet121 as the onnx wheel ships it (every conv weight the same
    constant): its output is the same on every generated image, though each sample's values differ.
    """
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.full((16, 8), weight, np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.2, 1.0, 8).astype(np.float32), "b")]
    n = helper.make_node
    graph = helper.make_graph([n("MatMul", ["x", "w"], ["h"], name="fc"), n("Add", ["h", "b"], ["y"], name="bias")],
                              "deaf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_an_output_the_same_for_every_sample_is_not_judged(tmp_path):
    path, alive = tmp_path / "deaf.onnx", tmp_path / "alive.onnx"
    deaf(path, weight=0.0)
    deaf(alive, weight=0.1)
    assert convert_and_gate(alive, Recipe(mode="fp16"), tmp_path / "alive16.onnx").report.verdict == "passed"

    report = convert_and_gate(path, Recipe(mode="fp16"), tmp_path / "deaf16.onnx").report
    assert report.passed is None and report.verdict == "not judged" and report.failures == []
    (fig,) = report.figures
    assert fig.signal_rows == fig.rows == 64  # every sample is far from zero: signal by the per-sample rule
    assert fig.same_for_every_sample and fig.sample_spread == 0.0
    assert "same output for every sample" in report.note and "'y'" in report.note and "--heldout" in report.note
