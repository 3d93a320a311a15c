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


def positions(path, rows: int = 64) -> None:
    """Token ids through a 100-row table, plus positions ``past .. past + seq`` through a ``rows``-row table.

    ``past`` is the length of ``past_key`` [batch, past, 8] (a decoder's cache), ``seq`` that of ``input_ids``.
    """
    rng = np.random.default_rng(0)
    table = [numpy_helper.from_array(rng.standard_normal((100, 8)).astype(np.float32), "tokens"),
             numpy_helper.from_array(rng.standard_normal((rows, 8)).astype(np.float32), "positions"),
             numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([1]), "at1")]
    n = helper.make_node
    nodes = [n("Gather", ["tokens", "input_ids"], ["tok"], name="embed"),
             n("Shape", ["past_key"], ["ps"], name="past_shape"), n("Shape", ["input_ids"], ["ss"], name="seq_shape"),
             n("Gather", ["ps", "one"], ["past"], name="past_len"), n("Gather", ["ss", "one"], ["seq"], name="seq_len"),
             n("Add", ["past", "seq"], ["end"], name="end"), n("Range", ["past", "end", "one"], ["pos"], name="range"),
             n("Gather", ["positions", "pos"], ["pe"], name="position_embed"),
             n("Add", ["tok", "pe"], ["hidden"], name="sum"),
             n("ReduceMean", ["past_key", "at1"], ["pk"], name="cache", keepdims=1),
             n("Add", ["hidden", "pk"], ["out"], name="with_cache")]
    graph = helper.make_graph(
        nodes, "positions", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
                             helper.make_tensor_value_info("past_key", TensorProto.FLOAT, ["batch", "past", 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", 8])], table)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def test_ids_stay_inside_their_tables_and_positions_past_a_table_shrink_the_lengths(tmp_path):
    path = tmp_path / "positions.onnx"
    positions(path)
    notes: list[str] = []
    feeds = gate_inputs(path, None, notes)
    (note,) = [n for n in notes if n.startswith("dynamic dimensions sized")]
    assert "sized 32, not 64" in note and "index out of range" in note, notes
    for feed in feeds:
        ids, past = feed["input_ids"], feed["past_key"]
        assert ids.min() >= 0 and ids.max() < 100  # token ids inside the token table
        assert past.shape[1] + ids.shape[1] <= 64  # past + current positions inside the 64-row table
    out = joined(infer(path, feeds))
    assert out["out"].shape == (sum(len(f["input_ids"]) for f in feeds), feeds[0]["input_ids"].shape[1], 8)


def domains(path) -> None:
    """Five inputs [batch, 8]: ``a`` through Flatten into Sqrt, ``b`` into Log, ``c`` squared (Pow by 2), ``d`` to
    the power 0.5, ``e`` into Relu."""
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.5, np.float32), "root")]
    nodes = [n("Flatten", ["a"], ["af"], name="flat"), n("Sqrt", ["af"], ["ya"], name="sqrt"),
             n("Log", ["b"], ["yb"], name="log"), n("Pow", ["c", "two"], ["yc"], name="square"),
             n("Pow", ["d", "root"], ["yd"], name="half_power"), n("Relu", ["e"], ["ye"], name="relu")]
    graph = helper.make_graph(
        nodes, "domains", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 8]) for x in "abcde"],
        [helper.make_tensor_value_info(f"y{x}", TensorProto.FLOAT, ["batch", 8]) for x in "abcde"], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def test_inputs_an_op_takes_only_where_non_negative_are_generated_non_negative_and_a_note_says_so(tmp_path):
    """On a normal input half of Sqrt's values would be NaN in FP32 itself, and the gate would judge nothing there."""
    domains(tmp_path / "domains.onnx")
    made = generated_inputs(onnx.load(str(tmp_path / "domains.onnx")))
    for name in "abd":
        assert made.data[name].min() >= 0 and made.data[name].std() > 0.3, name
    for name in "ce":  # x ** 2 and Relu take any x: normal, as before
        assert (made.data[name] < 0).mean() > 0.3, name
    said = [note for note in made.notes if "magnitudes" in note]
    assert said == [f"generated input {x!r} as the magnitudes of normal values (x >= 0): the graph takes it into "
                    f"{op}, which is defined for x >= 0 only" for x, op in
                    (("a", "Sqrt 'sqrt'"), ("b", "Log 'log'"), ("d", "Pow 'half_power'"))]
    run = joined(infer(tmp_path / "domains.onnx", [made.data], keep=False))
    assert all(np.isfinite(run[f"y{x}"]).all() for x in "acde")  # Log of 0 would be -inf: normal values are not 0
