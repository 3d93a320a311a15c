"""Nodes kept out of int8/fp8 quantization run in FP32, as ``--keep-fp32`` (and auto-pin) says they do.

ModelOpt's ``quantize`` converts every layer it does not quantize to its ``high_precision_dtype``: FP16, which
trtfarm keeps for the rest of the model (TensorRT runs it fastest so). A node excluded from quantization
(``nodes_to_exclude``, ``op_types_to_exclude``) ends in FP16 with the rest, and ModelOpt has no per-node choice.
Afterwards each such node is put back in FP32: every FP16 input is cast to FP32 (an FP16 initializer that only
it reads is stored in FP32 instead), and every FP16 output is computed in FP32 under a new name and cast to FP16
under its own, so the nodes that read it see what they saw. Nodes whose output type an attribute fixes (a Cast, a
Constant) and control flow are left as they are (``pins_in_fp32``).

A sequence that ``SequenceEmpty`` starts is kept in FP32 by both converters, from ``SequenceEmpty`` to where tensors
come out of it (``sequences_started_empty``): its element type is the ``dtype`` attribute, which neither AutoCast nor
quantization's FP16 pass changes (ModelOpt 0.47), so the FP16 tensors they cast for ``SequenceInsert`` would not fit
it, and onnxruntime refuses the model.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtfarm.onnxfile import load_model
from trtfarm.precision.nodes import NOT_COMPUTE
from trtfarm.precision.recipe import Recipe

HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
SEQUENCE_OUT = {"SequenceInsert", "SequenceErase"}  # ops that read a sequence (input 0) and give one
SEQUENCE_END = {"SequenceAt", "SequenceLength", "ConcatFromSequence"}  # ops that read one and give tensors


def pinned_names(model: onnx.ModelProto, keep_fp32: list[str], keep_fp32_ops: list[str]) -> list[str]:
    """The nodes ModelOpt excludes for these patterns: a name ``re.match``-ing one, or one of these op types."""
    return [n.name for n in model.graph.node
            if any(re.match(p, n.name) for p in keep_fp32) or n.op_type in keep_fp32_ops]


def _types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError):
        inferred = model
    g = inferred.graph
    found = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.output, *g.input]}
    found.update({i.name: i.data_type for i in model.graph.initializer})
    return found


def _pinnable(node: onnx.NodeProto) -> bool:
    return node.op_type not in NOT_COMPUTE and not any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def keep_in_fp32(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """Put the named nodes of ``model`` (ModelOpt's quantized output) in FP32, in place; returns those changed."""
    g = model.graph
    types = _types(model)
    inits = {i.name: i for i in g.initializer}
    readers: dict[str, int] = {}
    for node in g.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    wanted, changed, nodes = set(names), [], []
    for node in g.node:
        if node.name not in wanted or not _pinnable(node):
            nodes.append(node)
            continue
        before, after = _wrap(node, types, inits, readers)
        nodes += [*before, node, *after]
        if before or after:
            changed.append(node.name)
    del g.node[:]
    g.node.extend(nodes)
    return changed


def _wrap(node: onnx.NodeProto, types: dict[str, int], inits: dict[str, onnx.TensorProto],
          readers: dict[str, int]) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """Casts before ``node`` (its FP16 inputs to FP32) and after it (its outputs back to FP16); edits ``node``."""
    before, after = [], []
    for i, name in enumerate(node.input):
        if not name or types.get(name) not in HALF:
            continue
        init = inits.get(name)
        if init is not None and readers.get(name) == 1:  # its own weight: stored in FP32
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), name))
            continue
        cast = f"{name}_to_fp32_for_{node.name}"
        before.append(helper.make_node("Cast", [name], [cast], name=cast, to=TensorProto.FLOAT))
        node.input[i] = cast
    for i, name in enumerate(node.output):
        if not name or types.get(name) not in HALF:
            continue
        wide = f"{name}_fp32"
        after.append(helper.make_node("Cast", [wide], [name], name=f"{node.name}_output{i}_to_low",
                                      to=types[name]))
        node.output[i] = wide
    return before, after


def sequences_started_empty(model: onnx.ModelProto, by: str = "AutoCast") -> dict[str, str]:
    """The nodes of each sequence that a ``SequenceEmpty`` starts, with why they stay FP32: name -> reason.

    ``by``: the conversion that would not change the sequence's element type (AutoCast, or quantization's FP16 pass).
    """
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.input:
            readers.setdefault(node.input[0], []).append(node)
    kept: dict[str, str] = {}
    for start in (n for n in model.graph.node if n.op_type == "SequenceEmpty"):
        why = (f"in the sequence {start.name} starts, kept in FP32: {by} does not change a SequenceEmpty's "
               "element type")
        todo = [start]
        while todo:
            node = todo.pop()
            kept.setdefault(node.name, why)
            if node is start or node.op_type in SEQUENCE_OUT:
                todo += [r for r in readers.get(node.output[0], []) if r.op_type in SEQUENCE_OUT | SEQUENCE_END
                         and r.name not in kept]
    return kept


def pins_in_fp32(clean: Path, out: Path, recipe: Recipe, sequences: dict[str, str]) -> None:
    """The nodes kept out of quantization put in FP32 (ModelOpt leaves them in FP16 with the rest: ``keep_in_fp32``).

    ``sequences``: the nodes of a sequence ``SequenceEmpty`` starts. Quantization's FP16 pass casts the tensors
    inserted into it to FP16 but leaves its element type FP32 and writes the sequences' ``value_info`` as FP32
    tensors, which onnxruntime refuses: those entries are dropped (ONNX's inference gives them again) and the
    inserted tensors cast back to FP32.
    """
    if not (recipe.keep_fp32 or recipe.keep_fp32_ops or sequences):
        return
    names = pinned_names(load_model(clean, weights=False), recipe.keep_fp32, recipe.keep_fp32_ops)
    model = load_model(out, weights=True)
    made = {t for n in model.graph.node if n.name in sequences and n.op_type in SEQUENCE_OUT | {"SequenceEmpty"}
            for t in n.output}
    typed = [v for v in model.graph.value_info if v.name not in made]
    dropped = len(typed) < len(model.graph.value_info)
    if dropped:
        del model.graph.value_info[:]
        model.graph.value_info.extend(typed)
    if keep_in_fp32(model, [*names, *sequences]) or dropped:
        onnx.save(model, str(out))
