"""A model no conversion starts from is told so first, in one line, before any data is read.

Already quantized (Q/DQ nodes, onnxruntime's com.microsoft QLinear* operators) or holding ai.onnx.ml operators:
each is refused naming what it found, for fp16 and int8 alike. The held-out file given is unreadable and int8 has
no calibration data: a refusal about either would mean the data came first.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.step import ConversionError, Recipe, convert_and_gate

F = TensorProto.FLOAT


def save(path, nodes, inits, domains=()) -> None:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, ["b", 4])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    *(helper.make_opsetid(d, 1) for d in domains)])
    model.ir_version = 8
    onnx.save(model, str(path))


def qdq(path) -> None:
    arrays = {"s": np.array(0.1, np.float32), "z": np.array(0, np.int8), "w": np.ones((4, 4), np.float32)}
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items()]
    n = helper.make_node
    save(path, [n("QuantizeLinear", ["x", "s", "z"], ["q"]), n("DequantizeLinear", ["q", "s", "z"], ["d"]),
                n("MatMul", ["d", "w"], ["y"])], inits)


def qlinear(path) -> None:
    scalars = {"s": np.array(0.1, np.float32), "z": np.array(0, np.uint8)}
    inits = [numpy_helper.from_array(v, k) for k, v in scalars.items()]
    n = helper.make_node
    save(path, [n("QuantizeLinear", ["x", "s", "z"], ["q"]),
                n("QLinearSigmoid", ["q", "s", "z", "s", "z"], ["qs"], domain="com.microsoft"),
                n("DequantizeLinear", ["qs", "s", "z"], ["y"])], inits, ["com.microsoft"])


def ml(path) -> None:
    save(path, [helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", offset=[0.0] * 4, scale=[2.0] * 4)],
         [], ["ai.onnx.ml"])


@pytest.mark.parametrize("make, said", [
    (qdq, "already quantized (DequantizeLinear x1, QuantizeLinear x1)"),
    (qlinear, "already quantized with onnxruntime's operators (QLinearSigmoid x1)"),
    (ml, "ai.onnx.ml operators (Scaler x1)"),
])
@pytest.mark.parametrize("mode", ["fp16", "int8"])
def test_a_model_no_conversion_starts_from_is_refused_first(tmp_path, make, said, mode):
    make(tmp_path / "model.onnx")
    bad = tmp_path / "heldout.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(ConversionError) as refused:
        convert_and_gate(tmp_path / "model.onnx", Recipe(mode=mode), tmp_path / "out.onnx", heldout=bad)
    text = str(refused.value)
    assert said in text and "\n" not in text and f"{mode}" in text and "Fix:" in text
    assert not (tmp_path / "out.onnx").exists()


def test_the_command_says_it_in_one_line_and_exits_2(tmp_path):
    qdq(tmp_path / "model.onnx")
    proc = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(tmp_path / "model.onnx"), "--mode",
                           "fp16"], cwd=tmp_path, env={**os.environ, "COLUMNS": "2000"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and "already quantized (DequantizeLinear x1, QuantizeLinear x1)" in line
