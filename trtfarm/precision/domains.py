"""What the graph says of an input's values: the table an id indexes, an operator's domain it must keep to.

Read through the ops that pass values on unchanged (casts, reshapes), for generated inputs (``inputs``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_PASSING = {"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand"}


def index_bound(model: onnx.ModelProto, name: str) -> int | None:
    """For integer ids: the row count of the table a ``Gather`` reads with them (through casts and reshapes)."""
    tables = {i.name: tuple(i.dims) for i in model.graph.initializer}
    tables.update({n.output[0]: tuple(n.attribute[0].t.dims) for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t")})
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    todo, seen, bounds = [name], set(), []
    while todo:
        tensor = todo.pop()
        for node in consumers.get(tensor, []):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                dims = tables.get(node.input[0])
                if dims and len(dims) > axis:
                    bounds.append(int(dims[axis]))
            elif node.op_type in _PASSING and node.input[0] == tensor and id(node) not in seen:
                seen.add(id(node))
                todo += list(node.output)
    return min(bounds) if bounds else None


NON_NEGATIVE = {"Sqrt", "Log", "Pow"}  # operators defined for x >= 0 only (Pow: its base, for a fractional exponent)


def _whole_exponent(model: onnx.ModelProto, node: onnx.NodeProto) -> bool:
    """A ``Pow`` whose exponent is a constant of whole numbers (x ** 2 takes any x)."""
    if node.op_type != "Pow" or len(node.input) < 2:
        return False
    found = [numpy_helper.to_array(i) for i in model.graph.initializer if i.name == node.input[1]]
    found += [numpy_helper.to_array(a.t) for n in model.graph.node if n.op_type == "Constant"
              and n.output[0] == node.input[1] for a in n.attribute if a.name == "value"]
    return bool(found) and bool(np.all(np.mod(found[0], 1) == 0))


def non_negative_inputs(model: onnx.ModelProto, floats: list[str]) -> dict[str, str]:
    """Inputs of ``floats`` the graph takes, through casts and reshapes, into an op defined for x >= 0 only.

    Name -> the op (``NON_NEGATIVE``, with its node's name where it has one).
    """
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    found = {}
    for name in floats:
        todo, seen = [name], set()
        while todo and name not in found:
            tensor = todo.pop()
            for node in consumers.get(tensor, []):
                if node.op_type in NON_NEGATIVE and node.input[0] == tensor and not _whole_exponent(model, node):
                    found[name] = f"{node.op_type} {node.name!r}" if node.name else node.op_type
                elif node.op_type in _PASSING and node.input[0] == tensor and id(node) not in seen:
                    seen.add(id(node))
                    todo += list(node.output)
    return found
