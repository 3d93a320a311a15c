"""Control flow gets a verdict: an If's branches and a Loop's body, fp16-converted or kept in FP32 and said so.

ModelOpt's AutoCast casts an If's branch inputs right (its branches stay FP32); a Loop's loop-carried input it casts
to FP16 while its body stays FP32, which onnxruntime refuses: the adapter keeps a Loop whole in FP32. Either way the
result's FP32 list names the subgraph's nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.step import Recipe, convert_and_gate

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def weights(name, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal((8, 8)) * scale).astype(np.float32), name)


def save(path, nodes, inits):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, ["b", 8]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", F, ["b", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def if_model(path):
    def branch(name):
        matmul = helper.make_node("MatMul", ["h", f"{name}_w"], [f"{name}_y"], name=f"{name}_matmul")
        return helper.make_graph([matmul], name, [], [helper.make_tensor_value_info(f"{name}_y", F, ["b", 8])],
                                 [weights(f"{name}_w")])

    n = helper.make_node
    return save(path, [n("MatMul", ["x", "w0"], ["h"], name="fc0"),
                       n("If", ["cond"], ["z"], name="choose", then_branch=branch("then"), else_branch=branch("else")),
                       n("Relu", ["z"], ["y"], name="out")], [weights("w0")])


def loop_model(path):
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s_in", "lw"], ["s_mm"], name="body_matmul"),
         helper.make_node("Tanh", ["s_mm"], ["s_out"], name="body_tanh"),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", F, ["b", 8])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", F, ["b", 8])], [weights("lw")])
    n = helper.make_node
    return save(path, [n("Loop", ["trip", "cond", "x"], ["z"], name="loop", body=body),
                       n("Relu", ["z"], ["y"], name="out")],
                [numpy_helper.from_array(np.array(3, np.int64), "trip")])


def test_fp16_of_an_if_model_gets_a_verdict_and_names_its_fp32_branches(tmp_path):
    result = convert_and_gate(if_model(tmp_path / "if.onnx"), Recipe(mode="fp16"), tmp_path / "o.onnx")
    assert result.report.verdict in ("passed", "failed") and result.report.figures[0].output == "y"
    kept = result.nodes.fp32_nodes
    assert {"then_matmul", "else_matmul"} <= set(kept) and "If choose" in kept["then_matmul"]
    assert result.nodes.by_precision["fp16"] >= 2  # fc0 and out outside the If are converted
    assert "then_matmul" in result.summary()


def test_fp16_of_a_loop_model_keeps_the_loop_in_fp32_and_gets_a_verdict(tmp_path):
    result = convert_and_gate(loop_model(tmp_path / "loop.onnx"), Recipe(mode="fp16"), tmp_path / "o.onnx")
    assert result.report.verdict in ("passed", "failed") and result.report.figures[0].output == "y"
    kept = result.nodes.fp32_nodes
    assert "loop-carried" in kept["loop"] and {"body_matmul", "body_tanh"} <= set(kept)
    assert result.nodes.fp32_nodes.get("out") is None
