"""Control flow gets a verdict: an If's branches and a Loop's body, fp16-converted or kept in FP32 and said so.

ModelOpt's AutoCast casts an If's branch inputs right (its branches stay FP32); a Loop's loop-carried input it casts
to FP16 while its body stays FP32, which onnxruntime refuses: the adapter keeps a Loop whole in FP32. Either way the
result's FP32 list names the subgraph's nodes. Where AutoCast fails on the subgraphs (an If branch that reads an
int64 index the main graph computes: it casts the index to FP32, as in silero-vad's opset-15 export), the main graph
is converted alone and the If stays FP32 with its branches, which the result's notes say.
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


def if_reading_the_main_graph(path):
    """An If whose branches read from the main graph: an int64 index (a Constant), the only use of fc0's output,
    and (the then branch) fc0's own weight ``w0``."""
    def branch(name, weight):
        return helper.make_graph(
            [helper.make_node("Gather", ["h", "idx"], [f"{name}_g"], name=f"{name}_gather", axis=1),
             helper.make_node("MatMul", [f"{name}_g", weight], [f"{name}_y"], name=f"{name}_matmul")],
            name, [], [helper.make_tensor_value_info(f"{name}_y", F, ["b", 8])],
            [weights(weight)] if weight != "w0" else [])

    n = helper.make_node
    index = numpy_helper.from_array(np.arange(8)[::-1].astype(np.int64))
    return save(path, [n("MatMul", ["x", "w0"], ["h"], name="fc0"),
                       n("Constant", [], ["idx"], name="index", value=index),
                       n("If", ["cond"], ["z"], name="choose", then_branch=branch("then", "w0"),
                         else_branch=branch("else", "else_w")),
                       n("Relu", ["z"], ["y"], name="out")], [weights("w0")])


def test_fp16_where_autocast_fails_on_the_branches_converts_the_main_graph_and_keeps_the_if_fp32(tmp_path):
    model = if_reading_the_main_graph(tmp_path / "if.onnx")
    result = convert_and_gate(model, Recipe(mode="fp16"), tmp_path / "o.onnx")
    assert result.report.verdict == "passed" and result.report.figures[0].output == "y"
    kept = result.nodes.fp32_nodes
    assert "could not fp16-convert this model's control flow" in kept["choose"]
    assert {"then_gather", "then_matmul", "else_gather", "else_matmul"} <= set(kept)
    assert {"fc0", "out"}.isdisjoint(kept) and result.nodes.by_precision["fp16"] == 2
    (note,) = [n for n in result.notes if "control flow" in n]
    assert "its main graph was converted alone, and If choose kept in FP32 with the 4 nodes" in note
    assert "h_subgraph_cast_to_fp32 is a node ModelOpt added, not the model's" in note  # never a pin to try
    converted = onnx.load(str(tmp_path / "o.onnx"))
    onnx.checker.check_model(converted, full_check=True)
    weights_of = {i.name: i.data_type for i in converted.graph.initializer}
    choose = next(node for node in converted.graph.node if node.name == "choose")
    then = next(a.g for a in choose.attribute if a.name == "then_branch")
    assert [node.input[1] for node in then.node if node.op_type == "MatMul"] == ["w0_as_exported"]
    assert weights_of == {"w0": TensorProto.FLOAT16, "w0_as_exported": F}  # fc0's in FP16, the branch's as exported


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
