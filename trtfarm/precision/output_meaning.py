"""What the FP32 graph says an output is, and so how the accuracy gate judges it (its kind).

Read from the graph, not from values: the range the output's last value-changing operator bounds it to (Sigmoid and
Softmax: [0, 1]; Tanh: [-1, 1]) through ops that only move or pick values, Softmax's class axis where nothing moved
values after it, and the constants the graph itself compares the output with (``prob > 0.3``: a threshold users
decide at). ``output_kind`` turns that, the recipe's task and farm.yaml's declared kind into the kind
``figures.py`` judges the output as: probability, classes, embedding or values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtfarm.precision.recipe import Recipe

RANGE_OF_OP = {"Sigmoid": (0.0, 1.0), "HardSigmoid": (0.0, 1.0), "Softmax": (0.0, 1.0), "Tanh": (-1.0, 1.0)}
# ops that move or pick values without changing their range
PASS_THROUGH = {"Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Resize", "Slice",
                "Gather", "Concat", "Expand", "Tile", "MaxPool", "Split", "DepthToSpace", "SpaceToDepth"}


def _bounding_node(tensor: str, producer: dict, depth: int = 0,
                   through: bool = False) -> tuple[onnx.NodeProto, bool] | None:
    """The op of ``RANGE_OF_OP`` that bounds ``tensor``, and whether ops that move values lie in between."""
    node = producer.get(tensor)
    if node is None or depth > 16:
        return None
    if node.op_type in RANGE_OF_OP:
        return node, through
    if node.op_type not in PASS_THROUGH:
        return None
    data = [node.input[0]] if node.op_type != "Concat" else list(node.input)
    found = [_bounding_node(t, producer, depth + 1, through or node.op_type not in ("Identity", "Cast"))
             for t in data if t]
    if not found or any(f is None for f in found) or len({f[0].op_type for f in found}) > 1:
        return None
    return found[0][0], found[0][1] or len(found) > 1


def output_ranges(model: onnx.ModelProto) -> dict[str, tuple[tuple[float, float], str]]:
    """Output name -> (range, the op it comes from) for outputs whose last value-changing op bounds them."""
    producer = {t: n for n in model.graph.node for t in n.output}

    def bound(tensor: str, depth: int = 0) -> tuple[tuple[float, float], str] | None:
        node = producer.get(tensor)
        if node is None or depth > 16:
            return None
        if node.op_type in RANGE_OF_OP:
            return RANGE_OF_OP[node.op_type], node.op_type
        if node.op_type not in PASS_THROUGH:
            return None
        data = [node.input[0]] if node.op_type != "Concat" else list(node.input)
        found = [bound(t, depth + 1) for t in data if t]
        if not found or any(f is None for f in found):
            return None
        return (min(f[0][0] for f in found), max(f[0][1] for f in found)), found[0][1]

    return {o.name: r for o in model.graph.output if (r := bound(o.name)) is not None}


@dataclass(frozen=True)
class OutputMeaning:
    """What the graph says an output is: the op that bounds it, Softmax's class axis, the graph's own thresholds."""

    op: str = ""
    axis: int | None = None
    cuts: tuple[float, ...] = ()


COMPARE = {"Greater", "GreaterOrEqual", "Less", "LessOrEqual"}


def output_meanings(model: onnx.ModelProto) -> dict[str, OutputMeaning]:
    """Output name -> its meaning, for every output of ``model``."""
    producer = {t: n for n in model.graph.node for t in n.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    out = {}
    for o in model.graph.output:
        found = _bounding_node(o.name, producer)
        op, axis = (found[0].op_type, None) if found else ("", None)
        if found and op == "Softmax" and not found[1]:  # the class axis holds only where nothing moved values
            axis = next((a.i for a in found[0].attribute if a.name == "axis"), -1 if opset >= 13 else 1)
        out[o.name] = OutputMeaning(op, axis, _graph_cuts(model, o.name))
    return out


def _scalar_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Initializers and Constant values of one element held in the file (no external data is read)."""
    found = {i.name: i for i in model.graph.initializer}
    found.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute
                  if a.name == "value"})
    return {k: t for k, t in found.items() if int(np.prod(t.dims)) == 1
            and t.data_location != onnx.TensorProto.EXTERNAL}


def _graph_cuts(model: onnx.ModelProto, name: str) -> tuple[float, ...]:
    """The constants the graph compares output ``name`` with (``prob > 0.3``), through ops that pass it on."""
    consts = _scalar_constants(model)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    cuts, todo, seen = set(), [name], set()
    while todo:
        tensor = todo.pop()
        for node in consumers.get(tensor, []):
            if node.op_type in COMPARE:
                other = [numpy_helper.to_array(consts[i]) for i in node.input if i != tensor and i in consts]
                cuts.update(float(f"{float(c.reshape(-1)[0]):.7g}") for c in other)
            elif node.op_type in PASS_THROUGH and node.input[0] == tensor and id(node) not in seen:
                seen.add(id(node))
                todo += list(node.output)
    return tuple(sorted(cuts))


def output_kind(name: str, recipe: Recipe, meaning: OutputMeaning | None) -> str:
    """How output ``name`` is judged: declared in the thresholds, else from the recipe's task and the graph."""
    declared = recipe.gate_thresholds.for_output(name).kind
    if declared:
        return declared
    if recipe.task in ("embedding", "classifier"):
        return {"embedding": "embedding", "classifier": "classes"}[recipe.task]
    if meaning and meaning.op in ("Sigmoid", "HardSigmoid"):
        return "probability"
    if meaning and meaning.op == "Softmax" and meaning.axis is not None:
        return "classes"
    return "values"
