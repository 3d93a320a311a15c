"""What onnxruntime's refusal of a generated feed says of its sizes: a dimension one input fixes ties a symbolic one.

A recurrent model's state may fix its batch (a GRU's ``initial_h`` of shape ``[2, 1, 96]``) while its features name
theirs (``[batch, frames, 40]``): generated at the common size, the features' batch is 64, and onnxruntime answers
``Input initial_h must have shape {2,64,96}. Actual:{2,1,96}``. ``tie_of`` reads that answer: where the input fixes
the dimension, the symbolic one the node meets it with (the node's other inputs at the same axis, followed back
through casts and transposes to a graph input; else an input's first dimension of the size asked) takes the fixed
size; where the input names the dimension itself, that name takes the size asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx

from trtfarm.onnxfile import dim_label

RECURRENT = {"RNN", "GRU", "LSTM"}  # their state inputs' batch axis is their input's: a tie there is on the batch
_SAME_AXES = {"Cast", "Identity", "Relu", "Sigmoid", "Tanh", "Neg", "Abs"}  # a tensor's axes come out as they went in
_ASKED = re.compile(r"Input (\S+) must have shape \{([-\d, ]*)\}\.?\s*Actual:\s*\{([-\d, ]*)\}")
_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


@dataclass(frozen=True)
class Tie:
    """A symbolic dimension sized as onnxruntime asked: ``symbol`` is ``size`` (was ``was``).

    ``input`` and ``axis``: the graph input whose dimension forced it (``fixed``: the model fixes it there);
    ``node``: the node onnxruntime named, as ``Op node 'name'``; ``recurrent``: that node is an RNN, GRU or LSTM,
    whose state ties its batch.
    """

    symbol: str
    size: int
    was: int
    input: str
    axis: int
    node: str
    fixed: bool
    recurrent: bool = False

    def note(self) -> str:
        """What the step changed and why, for the result's notes."""
        why = (f"input {self.input!r} is fixed at {self.size} in dimension {self.axis}, and {self.node} ties "
               f"{self.symbol!r} to it" if self.fixed else
               f"{self.node} asked input {self.input!r} for {self.size} in dimension {self.axis}")
        return (f"dimension {self.symbol!r} sized {self.size}, not {self.was}: onnxruntime refused the generated "
                f"inputs ({why}), and the step retried with the size it named")


def answer_text(err: BaseException) -> str:
    """``err`` and the errors it was raised from, joined: the library's own words sit at the end of the chain."""
    parts, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        parts.append(str(err))
        err = err.__cause__
    return " | ".join(parts)


def tie_of(model: onnx.ModelProto, sizes: dict[str, int], text: str) -> Tie | None:
    """The tie onnxruntime's words ``text`` name (``Input X must have shape {..}. Actual:{..}``), or None."""
    asked = _ASKED.search(text)
    if not asked:
        return None
    name, want, got = asked.group(1), _ints(asked.group(2)), _ints(asked.group(3))
    node = _NODE.search(text)
    where = f"{node.group(1)} node {node.group(2)!r}" if node else "a node"
    recurrent = bool(node) and node.group(1) in RECURRENT
    if len(want) != len(got):
        return None
    for axis in (a for a, (w, g) in enumerate(zip(want, got, strict=True)) if w != g):
        source = _source(model, name, axis)
        if source is None:
            continue
        label = _inputs(model)[source[0]][source[1]]
        if isinstance(label, str) and sizes.get(label) == got[axis]:  # its own name: it takes the size asked
            return Tie(label, want[axis], got[axis], source[0], source[1], where, False, recurrent)
        if label == got[axis]:  # fixed there: the symbol the node meets it with takes the fixed size
            symbol = _tied_symbol(model, sizes, node.group(2) if node else None, name, axis, want[axis])
            if symbol:
                return Tie(symbol, got[axis], want[axis], source[0], source[1], where, True, recurrent)
    return None


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _inputs(model: onnx.ModelProto) -> dict[str, list]:
    weights = {i.name for i in model.graph.initializer}
    return {i.name: [dim_label(d) for d in i.type.tensor_type.shape.dim] for i in model.graph.input
            if i.name not in weights}


def _source(model: onnx.ModelProto, tensor: str, axis: int) -> tuple[str, int] | None:
    """The graph input and axis ``tensor``'s ``axis`` comes from, through casts and transposes; None if computed."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inputs = _inputs(model)
    while tensor not in inputs:
        node = producers.get(tensor)
        if node is None or node.op_type not in _SAME_AXES | {"Transpose"}:
            return None
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        if node.op_type == "Transpose":
            if perm is None or axis >= len(perm):
                return None
            axis = perm[axis]
        tensor = node.input[0]
    return (tensor, axis) if axis < len(inputs[tensor]) else None


def _tied_symbol(model: onnx.ModelProto, sizes: dict[str, int], node_name: str | None, tensor: str, axis: int,
                 wanted: int) -> str | None:
    """The symbolic dimension of size ``wanted`` that ``tensor``'s fixed ``axis`` meets.

    First the named node's other inputs at the same axis (a GRU's ``X`` and ``initial_h`` share their batch axis),
    followed back to a graph input; else a symbol that is an input's first dimension; else any of that size.
    """
    nodes = [n for n in model.graph.node if n.name == node_name and tensor in n.input] or \
        [n for n in model.graph.node if tensor in n.input]
    inputs = _inputs(model)
    for node in nodes:
        for other in (i for i in node.input if i and i != tensor):
            source = _source(model, other, axis)
            label = inputs[source[0]][source[1]] if source else None
            if isinstance(label, str) and sizes.get(label) == wanted:
                return label
    firsts = [dims[0] for dims in inputs.values() if dims and isinstance(dims[0], str)]
    every = [d for dims in inputs.values() for d in dims if isinstance(d, str)]
    return next((d for d in [*firsts, *every] if sizes.get(d) == wanted), None)
