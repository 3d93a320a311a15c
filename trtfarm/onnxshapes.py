"""The sizes an ONNX graph's inputs take, by the rules exporters write into the graph.

- A dimension's name may be arithmetic over other names: ``past_sequence_length + sequence_length`` (a decoder's
  mask, as Optimum and the TorchScript exporter write it), ``2*s0``, ``s1 - 1`` (``dim_size``, ``dim_names``).
- An int32/int64 input of rank 0 or 1 that reaches an operator's shape operand (``Expand``'s shape, ``Reshape``'s,
  ``Tile``'s repeats, ...), directly or through shape arithmetic, is a shape tensor to TensorRT: its optimization
  profile gives its values, not its shape (``shape_tensor_inputs``, ``onnx_shape_tensors``).

The file itself is read by ``onnxfile.py``, the one ONNX reader; this module only says what its graph means.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trtfarm.onnxfile import onnx_graph

if TYPE_CHECKING:
    import onnx


def dim_size(label: str, sizes: dict[str, int]) -> int | None:
    """The size of a named dimension given sizes for names: a name itself, or arithmetic over names.

    Exporters name a dimension that is computed from others by the expression: ``past_sequence_length +
    sequence_length`` (a decoder's mask, as Optimum and the TorchScript exporter write it), ``2*s0``, ``s1 - 1``.
    Returns None when the label uses a name ``sizes`` does not give or an operator other than + - * // (floor).
    """
    if label in sizes or not is_expression(label):
        return sizes.get(label)
    import ast

    try:
        tree = ast.parse(label, mode="eval").body
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return sizes.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = value(node.left), value(node.right)
            if a is None or b is None or (isinstance(node.op, ast.FloorDiv) and b == 0):
                return None
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op), a // b if b else None)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("floor", "ceiling") and node.args:
            return value(node.args[0])
        return None

    return value(tree)


def is_expression(label: str) -> bool:
    """True for a label computed from other names (``past + seq``, ``2*s0``); ``p2o.D1`` or ``?`` are plain names."""
    import re

    return bool(re.search(r"[-+*/() ]", label.strip()))


def dim_names(label: str) -> set[str]:
    """The names a dimension label refers to (``past + seq`` -> {past, seq}); a plain name refers to itself."""
    import re

    if not is_expression(label):
        return {label}
    return {n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", label) if n not in ("floor", "ceiling")}


# Inputs of these operators are shapes, sizes or counts (TensorRT: shape tensors, whose values a profile gives)
SHAPE_OPERANDS = {"Expand": (1,), "Reshape": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Range": (0, 1, 2),
                  "Slice": (1, 2, 3, 4), "Resize": (3,), "TopK": (1,), "OneHot": (1,), "Pad": (1,), "Unsqueeze": (1,),
                  "Squeeze": (1,), "Split": (1,), "CenterCropPad": (1,), "Upsample": (1,)}
# operators through which a value stays a shape value (shape arithmetic)
_SHAPE_PASSING = {"Cast", "Identity", "Concat", "Unsqueeze", "Squeeze", "Gather", "Slice", "Add", "Sub", "Mul",
                  "Div", "Max", "Min", "Reshape", "Neg", "Abs", "Floor", "Ceil", "ReduceProd", "ReduceSum"}
_INTEGER_TYPES = {6, 7}  # onnx.TensorProto.INT32, INT64 (numbers: reading a file imports no onnx)


def shape_tensor_inputs(inputs: list[onnx.ValueInfoProto], nodes: list[onnx.NodeProto]) -> dict[str, str]:
    """Graph inputs whose values are used as shapes: name -> what they shape (``the shape of Expand 'e'``).

    TensorRT calls such an input a shape tensor: an int32/int64 input of rank 0 or 1 that reaches an operator's
    shape operand (``Expand``'s shape, ``Reshape``'s shape, ``Tile``'s repeats, ...), directly or through shape
    arithmetic. Its optimization profile gives its values, not its shape.
    """
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = {}
    for vi in inputs:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or t.elem_type not in _INTEGER_TYPES or len(t.shape.dim) > 1:
            continue
        todo, seen = [vi.name], set()
        while todo and vi.name not in found:
            tensor = todo.pop()
            for node in consumers.get(tensor, []):
                slots = [i for i, n in enumerate(node.input) if n == tensor]
                if any(i in SHAPE_OPERANDS.get(node.op_type, ()) for i in slots):
                    found[vi.name] = f"the {'shape' if node.op_type != 'Tile' else 'repeats'} of {node.op_type} " \
                                     f"{node.name or node.output[0]!r}"
                    break
                if node.op_type in _SHAPE_PASSING and node.name not in seen:
                    seen.add(node.name or node.output[0])
                    todo += [o for o in node.output if o]
    return found


def onnx_shape_tensors(path: str | Path) -> dict[str, str]:
    """The graph inputs whose values are shapes (TensorRT's shape tensors): name -> what they shape.

    Reads the graph's nodes and inputs from a memory map, skipping the weights (``onnxfile.onnx_graph``).
    """
    return shape_tensor_inputs(*onnx_graph(path))
