"""Generated inputs give one size per dimension name across all inputs, wherever the name stands.

A recurrent model takes its state as ``[layers, batch, hidden]`` beside features ``[batch, time, feat]``: the
batch is the name the inputs share, at axis 1 of the state, and the samples run along it there too.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.inputs import batch_axes, generated_inputs
from trtfarm.precision.runs import batch_axes_of, infer, joined
from trtfarm.precision.step import gate_inputs


def recurrent(path, layers: int = 2) -> None:
    """``y = mean_t(x) @ w`` [batch, 8]; ``hn = h0 + c0 + y`` [layers, batch, 8] (the state keeps its axes)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32), "w")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    n = helper.make_node
    nodes = [n("ReduceMean", ["x"], ["m"], name="mean", axes=[1], keepdims=0),
             n("MatMul", ["m", "w"], ["y"], name="fc"),
             n("Unsqueeze", ["y", "zero"], ["y1"], name="lift"), n("Add", ["h0", "c0"], ["s"], name="state"),
             n("Add", ["s", "y1"], ["hn"], name="step")]
    state = [helper.make_tensor_value_info(s, TensorProto.FLOAT, [layers, "batch", 8]) for s in ("h0", "c0")]
    graph = helper.make_graph(
        nodes, "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, 4]), *state],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("hn", TensorProto.FLOAT, [layers, "batch", 8])], [w, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def test_inputs_sharing_a_dimension_name_share_its_size_and_run(tmp_path):
    path = tmp_path / "rnn.onnx"
    recurrent(path)
    model = onnx.load(str(path))
    assert batch_axes(model) == {"x": 0, "h0": 1, "c0": 1}

    made = generated_inputs(model)
    x, h0, c0 = made.data["x"], made.data["h0"], made.data["c0"]
    assert x.shape[1:] == (5, 4) and h0.shape[0] == c0.shape[0] == 2 and h0.shape[2] == 8  # the model's own sizes
    assert x.shape[0] == h0.shape[1] == c0.shape[1] > 1  # one batch size for the name, samples along it

    feeds = gate_inputs(path, None)
    assert len(feeds) > 1
    for feed in feeds:
        assert feed["x"].shape[0] == feed["h0"].shape[1] == feed["c0"].shape[1]
    out = joined(infer(path, feeds), axes=batch_axes_of(path))  # the state joined along its batch axis
    assert out["y"].shape == (x.shape[0], 8) and out["hn"].shape == (2, x.shape[0], 8)
