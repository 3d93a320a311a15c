"""Refusals quote a library's reason whole, or cut at a word boundary and marked with "…": never inside a word."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.errors import UserInputError
from trtfarm.precision.step import gate_inputs

LONG_NAME = "a_long_node_name_" * 6  # onnxruntime's reason quotes it: the reason runs past 300 characters


def unrunnable(path) -> None:
    """A Reshape to a fixed [3, 7] of an input [b, 5]: onnxruntime refuses it on any generated input."""
    inits = [numpy_helper.from_array(np.array([3, 7], np.int64), "shape")]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name=LONG_NAME)]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_long_onnxruntime_reason_is_cut_between_words(tmp_path):
    path = tmp_path / "model.onnx"
    unrunnable(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as raised:
        session.run(None, {"x": np.zeros((1, 5), np.float32)})
    full = str(raised.value).splitlines()[0]
    assert len(full) > 300 and LONG_NAME in full

    with pytest.raises(UserInputError) as refused:
        gate_inputs(path, None)
    text = str(refused.value)
    quoted = text.split("generated inputs (", 1)[1].split("). Fix: ", 1)[0]
    assert quoted.endswith("…") and len(quoted) <= 301
    kept = quoted.removesuffix("…").removeprefix(f"{type(raised.value).__name__}: ")
    assert full.startswith(kept) and full[len(kept)] == " "  # the last word quoted is whole
    assert text.count("Fix:") == 1 and "--heldout heldout.npz" in text  # one fix: this refusal's own


def test_clip_keeps_short_text_and_cuts_long_text_at_a_word():
    from trtfarm.precision.recipe import clip

    fix = "Fix: keep the failing nodes in FP32 (--keep-fp32 REGEX)"
    assert clip(fix) == fix
    long = " ".join(["--keep-fp32 REGEX"] * 30)
    cut = clip(long, 100)
    assert cut.endswith("…") and len(cut) <= 101
    assert all(word in ("--keep-fp32", "REGEX") for word in cut.removesuffix("…").split())
    assert clip("x" * 400).endswith("…") and len(clip("x" * 400)) == 301  # one word longer than the limit: marked
