"""Sequence graphs, PyTorch's opset-6 Pad exports and FP64 boundaries get an fp16 verdict, not a ModelOpt refusal.

The forms onnx's own test models take (``simple/test_sequence_model*``, ``pytorch-converted/test_*Pad2d``):
ModelOpt 0.47's AutoCast failed on each of them. Where its own functions are at fault the adapter works around them
(``workarounds`` 7-9: each model here fails with ModelOpt's own functions and converts with the replacements); what
ModelOpt cannot take is normalised first and said in the notes; what it cannot convert (a sequence that
``SequenceEmpty`` starts) is kept in FP32 and named in the result's FP32 list with the reason.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision import workarounds
from trtfarm.precision.step import ConversionError, Recipe, convert_and_gate

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def save(path, nodes, inputs, outputs, inits=(), opset=17, ir=8):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _w(name):
    return numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), name)


def construct_concat(path):
    """Two MatMuls whose results a SequenceConstruct gathers and ConcatFromSequence joins (onnx's sequence_model4)."""
    n = helper.make_node
    return save(path, [n("MatMul", ["x", "w0"], ["a"], name="fc0"), n("MatMul", ["x", "w1"], ["b"], name="fc1"),
                       n("SequenceConstruct", ["a", "b"], ["seq"], name="gather"),
                       n("ConcatFromSequence", ["seq"], ["y"], name="join", axis=1)],
                [helper.make_tensor_value_info("x", F, ["n", 8])], [helper.make_tensor_value_info("y", F, ["n", 16])],
                [_w("w0"), _w("w1")])


def started_empty(path):
    """A sequence built from SequenceEmpty by SequenceInsert, read back by SequenceAt (onnx's sequence_model1),
    whose position is an input with a default value."""
    n = helper.make_node
    return save(path, [n("MatMul", ["x", "w0"], ["a"], name="fc0"), n("Tanh", ["x"], ["b"], name="act"),
                       n("SequenceEmpty", [], ["s0"], name="empty"),
                       n("SequenceInsert", ["s0", "a"], ["s1"], name="put_a"),
                       n("SequenceInsert", ["s1", "b"], ["s2"], name="put_b"),
                       n("SequenceAt", ["s2", "at"], ["c"], name="take"), n("Relu", ["c"], ["y"], name="out")],
                [helper.make_tensor_value_info("x", F, ["n", 8]),
                 helper.make_tensor_value_info("at", TensorProto.INT64, [])],
                [helper.make_tensor_value_info("y", F, ["n", 8])],
                [_w("w0"), numpy_helper.from_array(np.array(1, np.int64), "at")])


def split_fp64(path):
    """An FP64 input split into a sequence, one part read back as the FP64 output (onnx's sequence_model7)."""
    n = helper.make_node
    d = TensorProto.DOUBLE
    return save(path, [n("SplitToSequence", ["x"], ["seq"], name="split", axis=0, keepdims=0),
                       n("SequenceAt", ["seq", "at"], ["y"], name="take")],
                [helper.make_tensor_value_info("x", d, [2, 3, 4]),
                 helper.make_tensor_value_info("at", TensorProto.INT64, [])],
                [helper.make_tensor_value_info("y", d, [3, 4])], [numpy_helper.from_array(np.array(1, np.int64), "at")])


def fp64_matmul(path):
    """An FP64 input and output around a MatMul: no sequence, so only the FP64 boundary is at stake."""
    n = helper.make_node
    d = TensorProto.DOUBLE
    return save(path, [n("Cast", ["x"], ["x32"], name="in", to=F), n("MatMul", ["x32", "w0"], ["h"], name="fc0"),
                       n("Cast", ["h"], ["y"], name="back", to=d)],
                [helper.make_tensor_value_info("x", d, ["n", 8])], [helper.make_tensor_value_info("y", d, ["n", 8])],
                [_w("w0")])


def pad_opset6(path):
    """PyTorch's IR-3, opset-6 Pad export: pads as an attribute, no initializers (onnx's test_ReflectionPad2d)."""
    n = helper.make_node
    return save(path, [n("Pad", ["x"], ["y"], mode="reflect", pads=[0, 0, 3, 1, 0, 0, 4, 2])],
                [helper.make_tensor_value_info("x", F, [2, 3, 8, 8])],
                [helper.make_tensor_value_info("y", F, [2, 3, 15, 11])], opset=6, ir=3)


def _verdict(path, tmp_path):
    result = convert_and_gate(path, Recipe(mode="fp16"), tmp_path / "out.onnx")
    assert result.report.verdict in ("passed", "failed"), result.summary()
    return result


def test_a_sequence_construct_and_concat_graph_is_converted_and_judged(tmp_path):
    result = _verdict(construct_concat(tmp_path / "m.onnx"), tmp_path)
    assert result.report.figures[0].output == "y"
    assert result.nodes.fp32_nodes == {} and result.nodes.by_precision == {"fp16": 4}  # the sequence counted too


def test_a_sequence_started_empty_is_kept_in_fp32_and_named_with_why(tmp_path):
    result = _verdict(started_empty(tmp_path / "m.onnx"), tmp_path)
    kept = result.nodes.fp32_nodes
    assert set(kept) == {"empty", "put_a", "put_b", "take"}, kept
    assert all("SequenceEmpty" in why and "empty" in why for why in kept.values())
    assert result.nodes.by_precision["fp16"] == 3  # fc0, act and out outside the sequence
    assert "empty (in the sequence empty starts, kept in FP32" in result.summary()
    assert any("default value (at)" in note for note in result.notes)


@pytest.mark.parametrize("make", [split_fp64, fp64_matmul])
def test_fp64_inputs_and_outputs_keep_their_type(make, tmp_path):
    result = _verdict(make(tmp_path / "m.onnx"), tmp_path)
    converted = onnx.load(str(result.path))
    assert [i.type.tensor_type.elem_type for i in converted.graph.input] == [TensorProto.DOUBLE]
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [TensorProto.DOUBLE]


def test_an_ir3_pad_export_without_weights_is_judged_and_said(tmp_path):
    result = _verdict(pad_opset6(tmp_path / "m.onnx"), tmp_path)
    assert result.report.verdict == "passed"
    assert any(note.startswith("IR version 3, raised to") for note in result.notes)


@pytest.mark.parametrize("make", [construct_concat, started_empty, split_fp64, fp64_matmul])
def test_modelopts_own_functions_fail_where_the_workarounds_convert(make, tmp_path):
    """The referee is ModelOpt itself: these models fail in its functions (``workarounds=False``: none replaced in
    the step's process), so the replacements change only what it could not do."""
    src = make(tmp_path / "m.onnx")
    _verdict(src, tmp_path)
    with pytest.raises(ConversionError, match="ModelOpt|onnxruntime"):
        convert_and_gate(src, Recipe(mode="fp16"), tmp_path / "own.onnx", workarounds=False)


def test_the_type_replacements_give_modelopts_types_on_tensors():
    """On ``value_info`` that are tensors (typed, untyped, with no type at all) 8's replacements write what
    ModelOpt's functions write; a sequence's they leave a sequence."""
    from modelopt.onnx.autocast import utils as autocast_utils
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    def graph():
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                               helper.make_node("SequenceConstruct", ["b"], ["s"]),
                               helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
        g.value_info.extend([helper.make_tensor_value_info("a", F, [2, 3]),
                             helper.make_value_info("b", onnx.TypeProto()),
                             helper.make_tensor_value_info("u", TensorProto.UNDEFINED, None)])
        return g

    class Holder:
        low_precision_type = type("T", (), {"onnx_type": TensorProto.FLOAT16})()

        def __init__(self, g):
            self.model = helper.make_model(g)

    own, mine = Holder(graph()), Holder(graph())
    autocast_utils.clear_types_and_shapes_recursive(own.model.graph)
    PrecisionConverter._ensure_types_are_defined(own)
    workarounds._tensor_types_cleared(autocast_utils.clear_types_and_shapes_recursive)(mine.model.graph)
    workarounds._ensure_types_are_defined(mine)
    assert own.model.SerializeToString() == mine.model.SerializeToString()
    seq = graph()
    seq.value_info.append(helper.make_value_info("s", helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(F, None))))
    theirs, held = Holder(seq), Holder(seq)
    PrecisionConverter._ensure_types_are_defined(theirs)
    assert theirs.model.graph.value_info[-1].type.HasField("tensor_type")  # ModelOpt's makes the sequence a tensor
    workarounds._ensure_types_are_defined(held)
    assert held.model.graph.value_info[-1].type.HasField("sequence_type")


def test_int8_keeps_a_sequence_started_empty_in_fp32_and_names_it(tmp_path):
    """Quantization's FP16 pass casts what goes into the sequence to FP16 and leaves the sequence FP32 (onnx's
    sequence_model1: onnxruntime refused the model it wrote); the chain is kept in FP32, as fp16 keeps it."""
    path = started_empty(tmp_path / "m.onnx")
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=rng.standard_normal((32, 8)).astype(np.float32))
    result = convert_and_gate(path, Recipe(mode="int8"), tmp_path / "out.onnx", calibration=calib)
    assert result.report.verdict in ("passed", "failed"), result.summary()
    kept = result.nodes.fp32_nodes
    assert {"empty", "put_a", "put_b", "take"} <= set(kept), kept
    assert all("quantization's FP16 pass" in kept[n] for n in ("empty", "put_a", "put_b", "take"))
