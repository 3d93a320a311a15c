"""An ONNX file is parsed in one place: ``trtfarm.onnxfile.load_model`` (``weights=True`` for its external data)."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trtfarm.onnxfile import load_model

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "trtfarm" / "onnxfile.py"
READERS = {"load", "load_model", "load_from_string"}  # onnx's own: each parses a whole model


def _onnx_reads(path: Path) -> list[int]:
    """Lines of ``path`` that call ``onnx.load``-like readers or import them from onnx."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in READERS and isinstance(node.value, ast.Name) \
                and node.value.id == "onnx":
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "onnx" and any(a.name in READERS for a in node.names):
            found.append(node.lineno)
    return found


def test_only_onnxfile_reads_an_onnx_file():
    offenders = [f"{p.relative_to(REPO)}:{line}" for pkg in ("trtfarm", "flows", "tasks")
                 for p in sorted((REPO / pkg).rglob("*.py")) if p != HOME for line in _onnx_reads(p)]
    assert offenders == [], f"read the model with trtfarm.onnxfile.load_model instead: {offenders}"


@pytest.mark.parametrize("weights", [False, True])
def test_load_model_reads_what_onnx_load_reads(tmp_path, weights):
    w = helper.make_tensor("w", TensorProto.FLOAT, [64], bytes(range(256)), raw=True)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], [w])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=True, location="weights.bin",
              size_threshold=0)
    mine = load_model(path, weights=weights)
    assert mine.SerializeToString() == onnx.load(str(path), load_external_data=weights).SerializeToString()
    assert (mine.graph.initializer[0].raw_data == bytes(range(256))) == weights
    assert (path.parent / "weights.bin").read_bytes() == bytes(range(256))  # the bytes lived outside the model
