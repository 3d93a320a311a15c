"""The main graph without its control flow: what ModelOpt converts when it cannot convert an If's or a Loop's body.

AutoCast (ModelOpt 0.47) converts control-flow subgraphs in place, and some exports defeat it. silero-vad's 16 kHz
opset-15 export reads int64 indices in its If branches that the main graph computes: AutoCast takes every tensor a
subgraph reads from outside for a float of its producer's precision (``_convert_initializers_recursive``), casts
the index to FP32, and onnx's inference then refuses the Gather that reads it; its own type inference, to which
it falls back, does not look outside a subgraph, and fails on the cast it inserted (``Input ... of node
..._subgraph_cast_to_fp32 has unknown type``). Its cleanup also removes a node whose only reader is a subgraph.
A ``--keep-fp32`` pin changes none of this: a subgraph's nodes are not the main graph's that ModelOpt pins.

Quantization's FP16 pass fails on the same exports ("Sanity Check Failed"), and on silero-vad's If-branched export
it writes branches whose element types disagree with their If, which onnx.checker passes and onnxruntime refuses to
load (``refused_by_onnxruntime``).

When a conversion of the whole model fails, or writes a model onnxruntime cannot load, the adapter converts the main
graph alone (``main_graph``): each control-flow node of the main graph is taken out, its outputs that the rest reads
become inputs, and what it reads from the main graph (its inputs, and the tensors its subgraphs read from the
enclosing scope) outputs; both converters keep a model's inputs and outputs in FP32, so these are FP32 at the
boundary. Its reference run, or its calibration, gets the values the FP32 model computes there
(``reference_feeds``). The control flow is then put back as it was, FP32, with the FP32 weights it reads
(``put_back``; upgraded by ONNX's version converter where the conversion raised the opset): ONNX's If, Loop and Scan
compute in the types their bodies are given, which are the export's. The result is loaded by onnxruntime before it
is used.
"""

from __future__ import annotations

import heapq
import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx.version_converter
from onnx import helper

from trtfarm.onnxfile import load_model

GRAPH_KINDS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies of a control-flow node (an If's two branches, a Loop's or a Scan's body); none for other nodes."""
    return [g for a in node.attribute if a.type in GRAPH_KINDS for g in ([a.g] if a.HasField("g") else a.graphs)]


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` (and the graphs nested in it) reads from the scopes around it."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        defined.update(node.output)
        reads.update(node.input)
        for inner in subgraphs(node):
            reads |= _outer_reads(inner)
    return {r for r in reads if r} - defined


def reads(node: onnx.NodeProto) -> list[str]:
    """What ``node`` reads from its graph: its inputs, and what its subgraphs read from outside them."""
    inner = set().union(*(_outer_reads(g) for g in subgraphs(node)))
    return [*dict.fromkeys([i for i in node.input if i] + sorted(inner - set(node.input)))]


@dataclass
class MainGraph:
    """The main graph without its control-flow nodes (``model``), and where they were cut out."""

    model: onnx.ModelProto
    flow: list[onnx.NodeProto]  # the control-flow nodes taken out, in the export's order
    inputs: list[str]  # their outputs that the rest of the graph reads: inputs here
    outputs: list[str]  # what they read that the rest computes: outputs here
    subgraph_nodes: int = 0
    weights: list[str] = field(default_factory=list)  # main-graph initializers the control flow reads
    untyped: list[str] = field(default_factory=list)  # cut tensors ONNX's inference does not declare
    exported: set[str] = field(default_factory=set)  # the export's node names, its subgraphs' too

    def said(self, mode: str, library: str, failure: str) -> tuple[dict[str, str], str]:
        """Why each control-flow node stays FP32, and the note that says what failed and what was done.

        ``failure``: the library's error, ``ValueError at modelopt/onnx/utils.py:963: ...``. A node it names that the
        export does not have is said to be the library's own (a ``--keep-fp32`` pin cannot name it).
        """
        why = f"kept in FP32 with its subgraphs: {library} could not {mode}-convert this model's control flow"
        named = re.search(r"\bnode (\S+)", failure)
        own = f"; {named[1]} is a node {library} added, not the model's" if named and named[1] not in \
            self.exported else ""
        return ({n.name: why for n in self.flow},
                f"{library} could not {mode}-convert this model's control flow ({failure}{own}): its main graph was "
                f"converted alone, and {', '.join(f'{n.op_type} {n.name}' for n in self.flow)} kept in FP32 with the "
                f"{self.subgraph_nodes} nodes of their subgraphs")


def node_names(graph: onnx.GraphProto) -> set[str]:
    """The names of ``graph``'s nodes and of every node in its subgraphs."""
    return {n.name for n in graph.node}.union(*(node_names(g) for n in graph.node for g in subgraphs(n)))


def _count(graph: onnx.GraphProto) -> int:
    return sum(1 + sum(_count(g) for g in subgraphs(n)) for n in graph.node)


def _typed(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The main-graph tensors ONNX's inference declares whole: element type and shape (a graph input needs both)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except (onnx.shape_inference.InferenceError, ValueError):
        inferred = model
    g = inferred.graph
    return {v.name: v for v in [*g.value_info, *g.input, *g.output]
            if v.type.tensor_type.elem_type and v.type.tensor_type.HasField("shape")}


def main_graph(model: onnx.ModelProto) -> MainGraph | None:
    """``model``'s main graph with its control-flow nodes cut out; None without any, or with nothing left.

    ``model`` is the normalised export (every node named, no ``value_info``), weights included. A cut tensor whose
    type ONNX's inference does not give is declared by ``reference_feeds`` from the FP32 model's run.
    """
    g = model.graph
    flow = [n for n in g.node if subgraphs(n)]
    rest = [n for n in g.node if not subgraphs(n)]
    made_by_rest = {t for n in rest for t in n.output}
    outputs = {o.name for o in g.output}
    read_by_rest = {i for n in rest for i in reads(n)} | outputs
    flow_reads = [*dict.fromkeys(t for n in flow for t in reads(n))]
    cut_in = [t for n in flow for t in n.output if t in read_by_rest]
    cut_out = [t for t in flow_reads if t in made_by_rest and t not in outputs]
    if not flow or not cut_out and not outputs & made_by_rest:
        return None
    types = _typed(model)
    main = helper.make_graph(
        rest, g.name,
        [i for i in g.input if i.name in read_by_rest] + [types.get(t) or onnx.ValueInfoProto(name=t) for t in cut_in],
        [o for o in g.output if o.name in made_by_rest] + [types.get(t) or onnx.ValueInfoProto(name=t)
                                                            for t in cut_out],
        [i for i in g.initializer if i.name in read_by_rest])
    cut = helper.make_model(main, opset_imports=model.opset_import, ir_version=model.ir_version,
                            producer_name=model.producer_name)
    cut.functions.extend(model.functions)
    weights = {i.name for i in g.initializer}
    return MainGraph(cut, flow, cut_in, cut_out, sum(_count(s) for n in flow for s in subgraphs(n)),
                     [t for t in flow_reads if t in weights], [t for t in [*cut_in, *cut_out] if t not in types],
                     node_names(g))


def reference_feeds(src: Path, cut: MainGraph, feeds: list[dict]) -> list[dict]:
    """The main graph's inputs on each feed: the export's that it reads, and the control flow's outputs (FP32).

    The cut tensors ONNX's inference left undeclared are declared from this run: its element type and rank.
    """
    from trtfarm.precision.runs import infer

    wanted = {i.name for i in cut.model.graph.input}
    extra = tuple(dict.fromkeys([*cut.inputs, *cut.untyped]))
    runs = infer(src, feeds, extra=extra, keep=False) if extra else [{} for _ in feeds]
    declared = {v.name: v for v in [*cut.model.graph.input, *cut.model.graph.output]}
    for name in cut.untyped:
        value = runs[0][name]
        declared[name].CopyFrom(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), [f"{name}_dim{i}" for i in range(value.ndim)]))
    cut.untyped = []
    return [{**{k: v for k, v in feed.items() if k in wanted}, **{t: out[t] for t in cut.inputs}}
            for feed, out in zip(feeds, runs, strict=True)]


def main_graph_converted(src: Path, out: Path, feeds: list[dict] | None, work: Path,
                         convert: Callable[[Path, list[dict] | None, Path], dict[str, str]]
                         ) -> tuple[MainGraph, dict[str, str]] | None:
    """``src``'s main graph converted by ``convert`` (path, feeds, where to write) with its control flow put back.

    Written to ``out`` only when done. Returns the cut and what ``convert`` returned (its reasons per FP32 node);
    None where the model has no control flow, or where it cannot be cut (nothing would be left, a cut tensor is
    untyped without feeds to run) or put back. What ``convert`` (ModelOpt) raises, the caller judges.
    """
    original = load_model(src, weights=True)
    if (cut := main_graph(original)) is None or cut.untyped and not feeds:
        return None
    data = reference_feeds(src, cut, feeds) if feeds else None
    onnx.save(cut.model, str(work / "main-graph.onnx"))
    done = work / "main-graph-converted.onnx"
    kept = convert(work / "main-graph.onnx", data, done)
    if (model := put_back(load_model(done, weights=True), original, cut)) is None:
        return None
    onnx.save(model, str(done))
    if refused_by_onnxruntime(done, src) is not None:
        return None
    shutil.copyfile(done, out)
    return cut, kept


def refused_by_onnxruntime(converted: Path, source: Path) -> str | None:
    """Where ``source`` has control flow, onnxruntime's reason for refusing to load ``converted``; else None.

    A conversion can write subgraphs whose types disagree with the graph around them (ModelOpt 0.47's int8 of
    silero-vad's If branches), which onnx.checker does not see and onnxruntime refuses when it loads the model.
    """
    if not any(subgraphs(n) for n in load_model(source, weights=False).graph.node):
        return None
    import onnxruntime as ort
    import onnxruntime.capi.onnxruntime_pybind11_state as state

    refusals = tuple(c for c in vars(state).values() if isinstance(c, type) and issubclass(c, Exception))
    try:
        ort.InferenceSession(str(converted), providers=["CPUExecutionProvider"])
    except refusals as err:
        return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return None


def put_back(converted: onnx.ModelProto, original: onnx.ModelProto, cut: MainGraph) -> onnx.ModelProto | None:
    """``converted`` (ModelOpt's output for ``cut``) with the control flow back in FP32; None where it cannot be.

    ModelOpt may raise the opset of what it converts (quantization writes Q/DQ at opset 19 or later): the control
    flow is then taken from the export upgraded to that opset by ONNX's version converter (None where it cannot).
    """
    opset = next((o.version for o in converted.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset != next((o.version for o in original.opset_import if o.domain in ("", "ai.onnx")), None):
        try:
            original = onnx.version_converter.convert_version(original, opset)
        except (onnx.version_converter.ConvertError, RuntimeError, ValueError):
            return None
    by_name = {n.name: n for n in original.graph.node}
    if any(n.name not in by_name for n in cut.flow):
        return None
    g = converted.graph
    flow = [_copy(by_name[n.name]) for n in cut.flow]
    _fp32_weights(g, original.graph, flow, cut.weights)
    for declared, theirs in ((g.input, original.graph.input), (g.output, original.graph.output)):
        del declared[:]
        declared.extend(theirs)
    nodes = _in_order([*g.node, *flow], {i.name for i in g.input} | {i.name for i in g.initializer})
    del g.node[:]
    g.node.extend(nodes)
    return converted


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _fp32_weights(g: onnx.GraphProto, original: onnx.GraphProto, flow: list[onnx.NodeProto],
                  names: list[str]) -> None:
    """The export's weights the control flow reads, in its types: added, or beside one ModelOpt converted."""
    theirs = {i.name: i for i in original.initializer}
    ours = {i.name: i for i in g.initializer}
    taken = set(ours) | {t for n in g.node for t in n.output}
    for name in names:
        if name not in ours:
            g.initializer.append(theirs[name])
        elif ours[name].data_type != theirs[name].data_type:
            fresh = f"{name}_as_exported"
            while fresh in taken:
                fresh += "_"
            copy = onnx.TensorProto()
            copy.CopyFrom(theirs[name])
            copy.name = fresh
            g.initializer.append(copy)
            for node in flow:
                _renamed_reads(node, name, fresh)


def _renamed_reads(node: onnx.NodeProto, name: str, fresh: str) -> None:
    node.input[:] = [fresh if i == name else i for i in node.input]
    for graph in subgraphs(node):
        for inner in graph.node:
            _renamed_reads(inner, name, fresh)


def _in_order(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where each comes after what it reads (its subgraphs' outer reads too), else as given."""
    made = {t: i for i, n in enumerate(nodes) for t in n.output if t}
    needs = [{made[t] for t in reads(n) if t in made and t not in available} - {i} for i, n in enumerate(nodes)]
    waiting = [len(d) for d in needs]
    readers: dict[int, list[int]] = defaultdict(list)
    for i, deps in enumerate(needs):
        for j in deps:
            readers[j].append(i)
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, r)
    return [nodes[i] for i in order] if len(order) == len(nodes) else nodes
