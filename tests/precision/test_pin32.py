"""A node put back in FP32 after quantization computes in FP32 and its readers see what they saw.

The model is FP16 as ModelOpt leaves what it does not quantize: two MatMuls that share one FP16 weight. Pinning
one casts its input and the shared weight to FP32 (the weight stays FP16 for the other), and casts its output back
to FP16; onnxruntime runs the result, and the pinned layer's output is the FP32 product rounded once to FP16.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.pin32 import keep_in_fp32, pinned_names

H = TensorProto.FLOAT16


def shared_weight_model() -> tuple[onnx.ModelProto, np.ndarray]:
    w = (np.random.default_rng(0).standard_normal((64, 64)) * 4).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc1"),
         helper.make_node("MatMul", ["h", "w"], ["y"], name="fc2")], "m",
        [helper.make_tensor_value_info("x", H, ["b", 64])],
        [helper.make_tensor_value_info("y", H, ["b", 64]), helper.make_tensor_value_info("h", H, ["b", 64])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w


def test_a_pinned_node_computes_in_fp32_beside_one_that_shares_its_weight():
    model, w = shared_weight_model()
    assert pinned_names(model, ["^fc1$"], []) == ["fc1"] and pinned_names(model, [], ["MatMul"]) == ["fc1", "fc2"]
    assert keep_in_fp32(model, ["fc1"]) == ["fc1"]
    onnx.checker.check_model(model, full_check=True)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert {c.attribute[0].i for c in casts} == {TensorProto.FLOAT, H} and len(casts) == 3  # x, w in; h out
    assert model.graph.initializer[0].data_type == H  # fc2 still reads it in FP16
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float16)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, h = session.run(["y", "h"], {"x": x})
    exact = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    assert h.dtype == np.float16 and np.array_equal(h, exact)  # the FP32 product, rounded once
    assert y.dtype == np.float16 and np.allclose(y.astype(np.float32), exact.astype(np.float32) @ w, rtol=1e-2,
                                                 atol=1.0)


def test_a_cast_or_a_node_not_named_is_left_as_it_is():
    model, _ = shared_weight_model()
    before = model.SerializeToString()
    assert keep_in_fp32(model, ["nope"]) == [] and model.SerializeToString() == before
