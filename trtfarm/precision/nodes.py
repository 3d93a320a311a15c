"""Which compute nodes of a converted model run in low precision, and why each other one stays FP32.

A compute node is a node of the FP32 export with a floating-point output (``Constant`` and ``Cast`` aside). In
the converted model it runs in the precision of that output: FP16/BF16 (AutoCast), INT8/FP8 when its inputs come
from ``DequantizeLinear`` (quantization), else FP32. Each FP32 node gets its reason: AutoCast's rule as AutoCast
logged it (``data_max``, ``init_max``, an op type without an FP16 form), a pin (``--keep-fp32``/``--keep-fp32-op``),
or auto-pin. The nodes inside control flow (an If's branches, a Loop's body) are judged by the types they compute in,
and a node that gives a sequence (``SequenceConstruct``) by the type of the sequence's tensors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from trtfarm.onnxfile import load_model

FLOATS = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16",
          onnx.TensorProto.DOUBLE: "fp64"}
NOT_COMPUTE = {"Constant", "ConstantOfShape", "Cast", "QuantizeLinear", "DequantizeLinear", "Identity", "Shape",
               "Range",
               "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"}


@dataclass
class NodePrecision:
    """The converted model's compute nodes by precision, and every FP32 one with its reason."""

    compute_nodes: int = 0
    low_precision_nodes: int = 0
    by_precision: dict[str, int] = field(default_factory=dict)
    fp32_nodes: dict[str, str] = field(default_factory=dict)  # node -> why it stays FP32

    def to_json(self) -> dict:
        """Plain JSON for the manifest and ``--json``."""
        return asdict(self)

    def text(self, mode: str, limit: int = 8) -> str:
        """``12 of 14 compute nodes in fp16; FP32: fc2 (AutoCast data_max: ...), ...``."""
        if not self.compute_nodes:
            return ""
        low = {p: n for p, n in self.by_precision.items() if p != "fp32"}
        mix = f"low precision ({', '.join(f'{p} {n}' for p, n in low.items())})" if len(low) > 1 else mode
        head = f"{self.low_precision_nodes} of {self.compute_nodes} compute nodes in {mix}"
        if not self.fp32_nodes:
            return head
        shown = [f"{n} ({why})" for n, why in list(self.fp32_nodes.items())[:limit]]
        more = len(self.fp32_nodes) - len(shown)
        return f"{head}; in FP32: {', '.join(shown)}" + (f" and {more} more" if more > 0 else "")


def _types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError):
        inferred = model
    found = {v.name: _elem_type(v.type) for v in
             list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)}
    found.update({i.name: i.data_type for i in model.graph.initializer})
    return found


def _elem_type(kind: onnx.TypeProto) -> int:
    """A tensor's element type, or that of a sequence's tensors (0: neither, or not known)."""
    if kind.HasField("sequence_type"):
        return _elem_type(kind.sequence_type.elem_type)
    return kind.tensor_type.elem_type


def node_precision(source: Path, converted: Path, mode: str, reasons: dict[str, str], *,
                   keep_fp32: list[str] = (), keep_fp32_ops: list[str] = (),
                   auto_pinned: list[str] = ()) -> NodePrecision:
    """Compare the (normalised) FP32 graph at ``source`` with ``converted``, node by node name."""
    src = load_model(source)
    out = load_model(converted)
    src_types, out_types = _types(src), _types(out)
    producers = {t: n for n in out.graph.node for t in n.output}
    by_name = {n.name: n for n in out.graph.node}
    report = NodePrecision()
    for node in src.graph.node:
        floats = [t for t in node.output if src_types.get(t) in FLOATS]
        if node.op_type in NOT_COMPUTE or not floats or node.name not in by_name:
            continue
        mine = by_name[node.name]
        dtype = next((out_types[t] for t in mine.output if t in out_types), None)
        quantized = any(producers.get(i) is not None and producers[i].op_type == "DequantizeLinear"
                        for i in mine.input)
        precision = mode if quantized else FLOATS.get(dtype, "fp32")
        report.compute_nodes += 1
        report.by_precision[precision] = report.by_precision.get(precision, 0) + 1
        if precision != "fp32":
            report.low_precision_nodes += 1
            continue
        report.fp32_nodes[node.name] = _why(node, mode, reasons, keep_fp32, keep_fp32_ops, auto_pinned)
    for node in out.graph.node:  # control flow: the nodes of its subgraphs, by the types they compute in
        for inner, dtype in _inner(node, out_types):
            if inner.op_type in NOT_COMPUTE or dtype not in FLOATS:
                continue
            precision = FLOATS[dtype]
            report.compute_nodes += 1
            report.by_precision[precision] = report.by_precision.get(precision, 0) + 1
            if precision != "fp32":
                report.low_precision_nodes += 1
            else:
                report.fp32_nodes[inner.name or f"{node.name}/{inner.op_type}"] = \
                    f"in the subgraph of {node.op_type} {node.name}, which the conversion left in FP32"
    return report


def _inner(node: onnx.NodeProto, outer: dict[str, int]) -> Iterator[tuple[onnx.NodeProto, int | None]]:
    """Each node of ``node``'s subgraphs (nested ones too), with the float type it computes in (None: no float)."""
    for attr in node.attribute:
        for graph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            types = {**outer, **{v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info]},
                     **{i.name: i.data_type for i in graph.initializer}}
            for n in graph.node:
                to = next((a.i if a.name == "to" else a.t.data_type for a in n.attribute
                           if (n.op_type, a.name) in (("Cast", "to"), ("Constant", "value"))), None)
                dtype = to if to is not None else next((types[i] for i in n.input if types.get(i) in FLOATS), None)
                types.update({t: dtype for t in n.output if dtype is not None})
                yield n, dtype
                yield from _inner(n, types)


def _why(node: onnx.NodeProto, mode: str, reasons: dict[str, str], keep_fp32, keep_fp32_ops, auto_pinned) -> str:
    if node.name in auto_pinned:
        return "auto-pin: the gate fails without it"
    if any(re.match(p, node.name) for p in keep_fp32):
        return "pinned: matches --keep-fp32"
    if node.op_type in keep_fp32_ops:
        return f"pinned: --keep-fp32-op {node.op_type}"
    if node.name in reasons:
        return reasons[node.name]
    return "AutoCast kept it" if mode in ("fp16", "bf16") else f"ModelOpt did not quantize it to {mode}"
