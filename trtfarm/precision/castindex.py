"""ModelOpt's redundant-cast removal with the graph's readers and writers looked up in an index, not scanned.

``modelopt.onnx.utils.remove_redundant_casts`` (run by AutoCast's cleanup, so by fp16/bf16 conversion and by int8/fp8
quantization, which converts the rest of the model to FP16) asks, for each Cast, which nodes read its output and
which node writes its input, by scanning every node (``get_consumer_nodes``, ``get_producer_nodes``), and, for each
Constant it folds a Cast into, scans every declaration and every node for the constant's declared type
(``_sync_value_info_elem_type``). That is quadratic in the nodes: 4-6 s of CPU on PP-OCRv4's detector at
800x608, most of a conversion's own work. ``remove_redundant_casts`` here is the same function, statement for
statement, with those three questions answered from an index of the graph that is updated wherever the function
rewires a node, so the model comes out the same, byte for byte (tests/precision/test_workarounds.py); ModelOpt's
own predicates, ``_is_same_type_cast`` and ``_convert_constant_values``, are called as they are.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

import onnx

# ModelOpt's order of float precisions in _is_sequential_cast (a cast up then down has no effect)
PRECISION_ORDER = [onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                   onnx.TensorProto.BFLOAT16]


class GraphIndex:
    """Per tensor name, the nodes that read it and the nodes that write it, in graph order (no node twice).

    ``get_consumer_nodes(model, t)`` is ``[n for n in graph.node if t in n.input]``: ``consumers(t)`` gives the same
    nodes while the node list itself is unchanged and every rewired node is passed to ``refresh``.
    """

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.nodes = list(graph.node)
        self._at = {id(n): k for k, n in enumerate(self.nodes)}
        self._seen: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        self._reads: dict[str, list[int]] = {}
        self._writes: dict[str, list[int]] = {}
        for k, node in enumerate(self.nodes):
            ins, outs = tuple(node.input), tuple(node.output)
            self._seen.append((ins, outs))
            for name in dict.fromkeys(ins):
                self._reads.setdefault(name, []).append(k)
            for name in dict.fromkeys(outs):
                self._writes.setdefault(name, []).append(k)

    def consumers(self, tensor: str) -> list[onnx.NodeProto]:
        """The nodes that read ``tensor``, in graph order."""
        return [self.nodes[k] for k in self._reads.get(tensor, ())]

    def producers(self, tensor: str) -> list[onnx.NodeProto]:
        """The nodes that write ``tensor``, in graph order."""
        return [self.nodes[k] for k in self._writes.get(tensor, ())]

    def refresh(self, node: onnx.NodeProto) -> None:
        """Index ``node`` again after its inputs or outputs were renamed."""
        k = self._at[id(node)]
        old_in, old_out = self._seen[k]
        new_in, new_out = tuple(node.input), tuple(node.output)
        for table, old, new in ((self._reads, old_in, new_in), (self._writes, old_out, new_out)):
            for name in set(old) - set(new):
                table[name].remove(k)
            for name in set(new) - set(old):
                bisect.insort(table.setdefault(name, []), k)
        self._seen[k] = (new_in, new_out)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph of its nodes' attributes, at any depth (as ModelOpt's sync recurses)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


class Declarations:
    """``_sync_value_info_elem_type`` on one graph, from an index of its declarations by tensor name.

    ModelOpt's function sets the element type of every ``value_info``, input and output declaration of the name,
    in the graph and all its subgraphs, and says whether there was one; declarations appended to the graph's
    ``value_info`` since (as ``_convert_constant_values`` appends one when there was none) are indexed first.
    """

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph, self.indexed = graph, len(graph.value_info)
        self.by_name: dict[str, list[onnx.ValueInfoProto]] = {}
        for g in _graphs(graph):
            for vi in [*g.value_info, *g.input, *g.output]:
                self.by_name.setdefault(vi.name, []).append(vi)

    def sync(self, tensor_name: str, elem_type: int) -> bool:
        """Set ``elem_type`` on every declaration of ``tensor_name``; whether there was one."""
        for vi in self.graph.value_info[self.indexed:]:
            self.by_name.setdefault(vi.name, []).append(vi)
        self.indexed = len(self.graph.value_info)
        updated = False
        for vi in self.by_name.get(tensor_name, ()):
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.elem_type = elem_type
                updated = True
        return updated


_CURRENT = threading.local()  # the Declarations of the graph this thread's remove_redundant_casts works on


def indexed_sync(original):
    """ModelOpt's ``_sync_value_info_elem_type`` from the index, for the graph this thread removes casts from.

    Any other graph, or outside ``remove_redundant_casts``, is answered by ``original`` itself.
    """

    def _sync_value_info_elem_type(graph: onnx.GraphProto, tensor_name: str, elem_type: int) -> bool:
        declarations = getattr(_CURRENT, "declarations", None)
        if declarations is None or graph is not declarations.graph:
            return original(graph, tensor_name, elem_type)
        return declarations.sync(tensor_name, elem_type)

    return _sync_value_info_elem_type


def _is_sequential_cast(utils, index: GraphIndex, node: onnx.NodeProto) -> bool:
    assert node.op_type == "Cast"
    output_type = utils.get_cast_to_type(node)
    consumers = [n for n in index.consumers(node.output[0]) if n.op_type == "Cast"]
    if len(consumers) != 1:
        return False
    second = utils.get_cast_to_type(consumers[0])
    return (output_type in PRECISION_ORDER and second in PRECISION_ORDER
            and PRECISION_ORDER.index(output_type) <= PRECISION_ORDER.index(second))


def _is_foldable_constant_cast_pattern(index: GraphIndex, node: onnx.NodeProto) -> bool:
    assert node.op_type == "Cast"
    producers = index.producers(node.input[0])
    if len(producers) == 1 and producers[0].op_type == "Constant":
        return len(index.consumers(producers[0].output[0])) == 1
    return False


def _bypass_cast_node(utils, index: GraphIndex, outputs: set[str], node: onnx.NodeProto) -> None:
    assert len(node.input) == 1
    assert len(node.output) == 1
    input_tensor, output_tensor = node.input[0], node.output[0]
    if output_tensor in outputs:  # keep the network output's name: the cast's producer writes it
        for producer in index.producers(input_tensor):
            for i, prod_out in enumerate(producer.output):
                if prod_out == input_tensor:
                    producer.output[i] = output_tensor
                    index.refresh(producer)
                    consumers = index.consumers(prod_out)
                    if len(consumers) > 1:
                        utils._replace_tensor_name(consumers, prod_out, output_tensor)
                        for consumer in consumers:
                            index.refresh(consumer)
    else:
        for consumer in index.consumers(output_tensor):
            for i, input_name in enumerate(consumer.input):
                if input_name == output_tensor:
                    consumer.input[i] = input_tensor
            index.refresh(consumer)


def remove_redundant_casts(onnx_model: onnx.ModelProto) -> onnx.ModelProto:
    """``modelopt.onnx.utils.remove_redundant_casts``, with indexed lookups (same casts removed, same model)."""
    from modelopt.onnx import utils

    type_map = utils._build_tensor_type_map(onnx_model)
    index = GraphIndex(onnx_model.graph)
    outputs = {o.name for o in onnx_model.graph.output}  # the function renames no graph output
    _CURRENT.declarations = Declarations(onnx_model.graph)
    try:
        return _remove(utils, onnx_model, type_map, index, outputs)
    finally:
        _CURRENT.declarations = None


def _remove(utils, onnx_model: onnx.ModelProto, type_map: dict, index: GraphIndex, outputs: set[str]):
    logger = utils.logger
    nodes_to_remove = []
    for node in index.nodes:  # the graph's nodes: none is added or removed until the end
        if node.op_type != "Cast":
            continue
        if utils._is_same_type_cast(onnx_model, node, type_map):
            nodes_to_remove.append(node)
            _bypass_cast_node(utils, index, outputs, node)
            logger.debug(f"Found redundant same-type cast: {node.name}")
            continue
        if _is_sequential_cast(utils, index, node):
            nodes_to_remove.append(node)
            _bypass_cast_node(utils, index, outputs, node)
            logger.debug(f"Found removable double-cast: {node.name}")
            continue
        if _is_foldable_constant_cast_pattern(index, node):
            nodes_to_remove.append(node)
            cast_producers = index.producers(node.input[0])
            assert len(cast_producers) == 1 and cast_producers[0].op_type == "Constant"
            utils._convert_constant_values(onnx_model, cast_producers[0], node)  # its sync: indexed_sync's
            _bypass_cast_node(utils, index, outputs, node)
            logger.debug(f"Found foldable Constant->Cast pattern, removing {node.name}")
    logger.debug(f"Removing redundant casts: {[n.name for n in nodes_to_remove]}")
    for node in nodes_to_remove:
        onnx_model.graph.node.remove(node)
    return onnx_model
