"""Costs inside ModelOpt that grow with the model, worked around while trtfarm's conversion runs.

Measured on PP-OCRv4's detector (672 nodes, three dynamic input dimensions) on the 2-core machine, they were most of
the precision step's CPU time (bench/precision_speed.py prints the step with and without them):

1. **Output-shape reconciliation.** Before AutoCast's reference run, and before quantizing, ModelOpt re-derives the
   graph outputs' shapes with onnxruntime's symbolic shape inference (``modelopt.onnx.utils.
   _reconcile_stale_output_shapes``) to repair an output declared with a stale rank. On symbolic input sizes its sympy
   simplification of what a strided Conv stack and a Resize compute grows with the model's depth (8-9 s of CPU on
   that detector, 0.1 s with the same sizes given as numbers). ONNX's own shape inference (C++, milliseconds) is
   asked first: when it infers every output with the rank its declaration has, and confirms each declared size, no
   declaration is stale and ModelOpt's function would change nothing, so it is not called. Otherwise (an output
   ONNX cannot infer, a rank or size that differs) ModelOpt's function runs as it is.
2. **Dead-end casts.** AutoCast's cleanup (also run by int8/fp8 quantization, which converts the rest of the model
   to FP16) looks for nodes whose outputs nothing reads by scanning every node's inputs for every output of every
   node (``PrecisionConverter._cleanup_no_consumer_nodes``): quadratic in the nodes (7 s of CPU on that detector's
   fp16 conversion, 12 s on its int8 one). The replacement collects the tensor names the nodes read once, and
   removes the same nodes in the same order.
3. **Redundant casts.** The cleanup's ``remove_redundant_casts`` finds each Cast's readers and writer, and each
   folded Constant's declarations, by scanning the whole graph every time (4-6 s of CPU on that detector at
   800x608): ``castindex`` is the same function with those lookups indexed.
4. **Copies of the reference run.** Polygraphy's ``Comparator``, which AutoCast's reference run goes through,
   deep-copies each run's outputs when there are several runs, in case the runner reuses its buffers.
   onnxruntime's runner does not, and the run marks every tensor as an output: at 800x608 that copy was 3 s of CPU
   and a gigabyte. The outputs are handed on as they are (``_FreshOutputs``).
5. **Node identities in control flow.** ``PrecisionConverter._convert_subgraph_precision`` (an If branch, a Loop
   body) classifies each node by ``id(node)`` in one pass over ``subgraph.node`` and looks the ids up in later
   passes. protobuf's upb runtime makes a new Python object for an element whenever none is alive: a node that
   nothing kept between passes (a Constant with no inputs) comes back with another id, and the lookup ends in a
   ``KeyError`` (silero-vad's If branches, at precisionconverter.py:1092). The replacement keeps every node's
   object alive while ModelOpt's function runs, so each pass sees the same ids; the function itself is unchanged.
6. **Histograms of masked scores.** int8 calibration merges each batch's histogram into the last one with
   onnxruntime's ``HistogramCollector.merge_histogram``, whose range is the tensor's threshold as a float32. A
   tensor that holds float32's lowest value (a decoder's additive attention mask, as the dynamo exporter writes
   GPT-2's) has a threshold of 3.4e38: numpy spaces the bins in float32, the range's width overflows to inf, and
   ``np.histogram`` raises "Too many bins for data range". When it does, the same merge is run again with the
   thresholds as Python floats (numpy then spaces the bins in float64, as ModelOpt already does for a tensor's
   first histogram); a merge that works is ModelOpt's own, unchanged.
7. **Sequences in the reference run.** AutoCast's reference run marks every tensor as an output, a sequence too
   (``SequenceConstruct``, ``SplitToSequence``); onnxruntime returns a sequence as a Python list, and Polygraphy's
   ``Comparator``, which the run goes through, cannot describe a list and raises ("dtype is unsupported for objects
   of type: list"). The runner hands on the run's arrays only: a tensor missing from the reference data is one
   AutoCast's range rule does not judge (as for a graph input), and the sequence's elements are judged where they
   come out of it as tensors (``SequenceAt``, ``ConcatFromSequence``). A model without sequences gets every output.
8. **Sequence types in the conversion.** After casting, AutoCast clears every ``value_info``'s type for ONNX's
   inference to give again (``autocast.utils.clear_types_and_shapes_recursive``), then gives each one still
   undefined the low-precision type (``PrecisionConverter._ensure_types_are_defined``). Both write the tensor
   element type, and on a sequence's ``value_info`` (which has no tensor type) that write makes it a tensor:
   onnxruntime refuses the converted model ("Type (tensor(float16)) of output arg (seq_1) ... does not match
   expected type (seq(tensor(float16)))"). The clear drops a sequence's, a map's or an optional's ``value_info``
   instead (ONNX's inference gives it again, with the element type the conversion left), and the second leaves
   those types as they are; every tensor's ``value_info`` gets what ModelOpt's functions give it.
9. **FP64 inputs and outputs.** AutoCast's sanitizer declares a graph's FP64 inputs and outputs FP32
   (``GraphSanitizer._convert_fp64_io_types``); with ``keep_io_types`` its last step puts the declared types back
   and refuses its own model when an element type changed (``_restore_original_io_metadata``: "element type
   changed", onnx's ``test_sequence_model7``). Before that step, each such input gets a Cast to the type the
   converted model reads it in, and each such output a Cast to FP64 where the model writes it (from FP32, or from
   FP16 where AutoCast left the output so), so the types it puts back are the model's; a model without FP64 inputs
   or outputs is left to ModelOpt's step as it is.
10. **Histograms one tensor after another.** int8 calibration makes each batch's histogram of every tensor in one
   loop (``HistogramCollector.collect``, which calls ModelOpt's ``_collect_value``): 1-2 s of the step on a 2-core
   machine while one core waits (PP-OCRv4's detector at 800x608, its recogniser). Each tensor's histogram reads and
   writes that tensor's entry only, and numpy releases the interpreter lock while it counts, so the tensors are
   split in parts of about equal size, one per CPU this process may use, each given to the same ``collect_value``
   in a thread of its own; the collector's entries are then put back in the order one loop would have written
   them. With one CPU, or one tensor, the loop runs as it is.

Each replaces ModelOpt's function only while a conversion runs (``modelopt_workarounds``), only on the ModelOpt
versions they were checked against (``CHECKED``; another version runs unchanged), and gives the model ModelOpt
gives, byte for byte (tests/precision/test_workarounds.py compares them on real models, test_castindex.py on
generated cast graphs); 7 to 9 change only what ModelOpt's own functions fail on (test_sequences.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

import numpy as np

from trtfarm.precision.held import HeldWhileAny

CHECKED = ("0.47.",)  # nvidia-modelopt versions whose functions these replace were read and compared


def applies() -> bool:
    """Whether the installed ModelOpt is one the workarounds were checked against."""
    try:
        version = metadata.version("nvidia-modelopt")
    except metadata.PackageNotFoundError:
        return False
    return version.startswith(CHECKED)


def _declared_shapes_hold(model) -> bool:
    """ONNX's shape inference confirms every declared graph output: same rank, and each declared size.

    The outputs' shapes are cleared for the inference (as ModelOpt clears them, so that a declaration does not bias
    it) and put back as they were.
    """
    import onnx
    from modelopt.onnx.utils import infer_shapes

    outputs = list(model.graph.output)
    if not outputs or not all(o.type.tensor_type.HasField("shape") for o in outputs):
        return False
    declared = []
    for o in outputs:
        snapshot = onnx.TensorShapeProto()
        snapshot.CopyFrom(o.type.tensor_type.shape)
        declared.append(snapshot)
        o.type.tensor_type.ClearField("shape")
    try:
        inferred = {o.name: o.type.tensor_type.shape for o in infer_shapes(model, strict_mode=False,
                                                                            data_prop=True).graph.output
                    if o.type.tensor_type.HasField("shape")}
    except Exception:  # noqa: BLE001 - ONNX cannot infer this model: ModelOpt's own inference decides
        inferred = {}
    finally:
        for o, snapshot in zip(outputs, declared, strict=True):
            o.type.tensor_type.shape.CopyFrom(snapshot)
    for o, decl in zip(outputs, declared, strict=True):
        got = inferred.get(o.name)
        if got is None or len(got.dim) != len(decl.dim):
            return False
        if any(d.HasField("dim_value") and not (i.HasField("dim_value") and i.dim_value == d.dim_value)
               for d, i in zip(decl.dim, got.dim, strict=True)):
            return False
    return True


def _reconcile(original):
    def reconcile_stale_output_shapes(model) -> int:
        """ModelOpt's reconciliation, skipped when ONNX's inference confirms every declared output shape."""
        return 0 if _declared_shapes_hold(model) else original(model)

    return reconcile_stale_output_shapes


def _cleanup_no_consumer_nodes(self) -> None:
    """ModelOpt's ``PrecisionConverter._cleanup_no_consumer_nodes`` with the consumed names collected once."""
    from modelopt.onnx.autocast.precisionconverter import logger

    graph = self.model.graph
    network_outputs = {o.name for o in graph.output}
    consumed = {name for node in graph.node for name in node.input}
    nodes_to_remove = [node for node in graph.node
                       if not any(out in network_outputs or out in consumed for out in node.output)]
    for node in nodes_to_remove:
        if node.op_type != "Cast":
            logger.debug(f"Removing non-cast node with no consumers: {node.name} (type: {node.op_type})")
        graph.node.remove(node)


class _FreshOutputs(dict):
    """One reference run's outputs: arrays onnxruntime allocated for this run alone, which nothing else holds.

    Polygraphy's ``Comparator.run`` deep-copies every run's outputs when there are several runs, because a runner
    may reuse its output buffers (TensorRT's do); onnxruntime's ``InferenceSession.run`` returns new arrays every
    time, so the copy is a copy of memory no one else can change. AutoCast's reference run marks every tensor as an
    output: on an 800x608 detector that copy was 3 s of CPU and a gigabyte. The copy of this mapping is a new
    mapping of the same arrays.
    """

    def __deepcopy__(self, memo: dict) -> _FreshOutputs:
        return _FreshOutputs(self)


def _fresh(infer):
    def fresh_infer(feed_dict, *args, **kwargs):
        return _FreshOutputs(infer(feed_dict, *args, **kwargs))

    return fresh_infer


def _fresh_outputs_runner(get_ort_runner):
    def _get_ort_runner(self, model):
        """ModelOpt's reference runners, whose outputs (arrays only: 7) say that a deep copy need not copy them."""
        from polygraphy.backend.onnxrt import OnnxrtRunner

        runners, temp_dir = get_ort_runner(self, model)
        for runner in runners:
            if type(runner) is OnnxrtRunner:  # onnxruntime's runner only: another may reuse its buffers
                runner.infer = _fresh(_arrays_only(runner.infer))
        return runners, temp_dir

    return _get_ort_runner


def _arrays_only(infer):
    def arrays_only_infer(feed_dict, *args, **kwargs):
        outputs = infer(feed_dict, *args, **kwargs)
        if all(_is_array(value) for value in outputs.values()):
            return outputs
        return {name: value for name, value in outputs.items() if _is_array(value)}  # a sequence is a list

    return arrays_only_infer


def _is_array(value) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape")


def _tensor_types_cleared(clear):
    def clear_types_and_shapes_recursive(graph, *args, **kwargs) -> None:
        """ModelOpt's clear, with the ``value_info`` of what is not a tensor (a sequence) dropped, not made one."""
        _drop_non_tensor_value_info(graph)
        return clear(graph, *args, **kwargs)

    return clear_types_and_shapes_recursive


def _drop_non_tensor_value_info(graph) -> None:
    kept = [vi for vi in graph.value_info if vi.type.WhichOneof("value") in (None, "tensor_type")]
    if len(kept) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(kept)
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else attr.graphs:
                _drop_non_tensor_value_info(sub)


def _ensure_types_are_defined(self) -> None:
    """ModelOpt's ``PrecisionConverter._ensure_types_are_defined``, leaving non-tensor types (a sequence) alone."""
    for vi in self.model.graph.value_info:
        if vi.type.WhichOneof("value") not in (None, "tensor_type"):
            continue
        if vi.type.tensor_type.elem_type == 0:  # onnx.TensorProto.UNDEFINED
            vi.type.tensor_type.elem_type = self.low_precision_type.onnx_type


def _fp64_io_cast(restore):
    def _restore_original_io_metadata(self) -> None:
        """ModelOpt's step, after Casts at the FP64 inputs and outputs its sanitizer declared FP32."""
        if self.keep_io_types:
            _cast_fp64_boundaries(self.model.graph, self.original_network_io_metadata)
        return restore(self)

    return _restore_original_io_metadata


def _cast_fp64_boundaries(graph, original: dict) -> None:
    import onnx

    double, lower = onnx.TensorProto.DOUBLE, {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                              onnx.TensorProto.BFLOAT16}
    for field_name in ("input", "output"):
        declared = {v.name: v.type.tensor_type.elem_type for v in original[field_name]}
        for value in getattr(graph, field_name):
            now = value.type.tensor_type.elem_type
            if declared.get(value.name) != double or now not in lower:
                continue
            name, inner = value.name, f"{value.name}_{onnx.helper.tensor_dtype_to_string(now).lower()[12:]}"
            _renamed(graph, name, inner, outputs=field_name == "output")
            value.type.tensor_type.elem_type = double
            if field_name == "input":
                graph.node.insert(0, onnx.helper.make_node("Cast", [name], [inner], name=f"{name}_from_fp64", to=now))
            else:
                graph.node.append(onnx.helper.make_node("Cast", [inner], [name], name=f"{name}_to_fp64", to=double))


def _renamed(graph, name: str, inner: str, outputs: bool) -> None:
    """Every read of tensor ``name`` reads ``inner`` (and, with ``outputs``, its writer writes ``inner``)."""
    for node in graph.node:
        node.input[:] = [inner if i == name else i for i in node.input]
        if outputs:
            node.output[:] = [inner if o == name else o for o in node.output]
    for vi in graph.value_info:
        if vi.name == name:
            vi.name = inner


def _stable_node_ids(convert):
    def _convert_subgraph_precision(self, subgraph, *args, **kwargs):
        """ModelOpt's function with the subgraph's node objects held, so ``id(node)`` is the same in every pass."""
        held = list(subgraph.node)
        try:
            return convert(self, subgraph, *args, **kwargs)
        finally:
            del held

    return _convert_subgraph_precision


def _wide_merge(merge):
    def merge_histogram(self, old_histogram, data_arr, new_min, new_max, new_threshold):
        """The merge onnxruntime does; when float32 bins overflow, the same merge with thresholds as Python floats."""
        try:
            return merge(self, old_histogram, data_arr, new_min, new_max, new_threshold)
        except ValueError as err:
            if "Too many bins" not in str(err):
                raise
        wide = (*old_histogram[:4], float(old_histogram[4]))
        return merge(self, wide, data_arr, new_min, new_max, float(new_threshold))

    return merge_histogram


def _split_collect(collect):
    def collect_in_parts(self, name_to_arr):
        """The ``collect`` of onnxruntime, the tensors split across threads (one part per CPU): the same histograms."""
        cpus = min(len(os.sched_getaffinity(0)), 4)
        if self.method not in {"distribution", "entropy"} or cpus < 2 or len(name_to_arr) < 2:
            return collect(self, name_to_arr)
        sizes = {name: sum(int(np.size(a)) for a in arrs) for name, arrs in name_to_arr.items()}
        parts: list[dict] = [{} for _ in range(cpus)]
        loads = [0] * cpus
        for name in sorted(name_to_arr, key=lambda n: -sizes[n]):  # largest first, each to the lightest part
            i = loads.index(min(loads))
            parts[i][name] = name_to_arr[name]
            loads[i] += sizes[name]
        order = [*self.histogram_dict, *(n for n in name_to_arr if n not in self.histogram_dict)]
        with ThreadPoolExecutor(max_workers=cpus) as pool:
            for done in [pool.submit(self.collect_value, part) for part in parts if part]:
                done.result()
        written = dict(self.histogram_dict)
        self.histogram_dict.clear()
        self.histogram_dict.update({n: written[n] for n in order if n in written})
        self.histogram_dict.update({n: v for n, v in written.items() if n not in self.histogram_dict})

    return collect_in_parts


def _install() -> list[tuple[object, str, object]]:
    from modelopt.onnx import utils
    from modelopt.onnx.autocast import utils as autocast_utils
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter
    from modelopt.onnx.autocast.referencerunner import ReferenceRunner
    from onnxruntime.quantization.calibrate import HistogramCollector

    from trtfarm.precision import castindex

    saved = [(utils, "_reconcile_stale_output_shapes", utils._reconcile_stale_output_shapes),
             (PrecisionConverter, "_cleanup_no_consumer_nodes", PrecisionConverter.__dict__[
                 "_cleanup_no_consumer_nodes"]),
             (utils, "remove_redundant_casts", utils.remove_redundant_casts),
             (utils, "_sync_value_info_elem_type", utils._sync_value_info_elem_type),
             (ReferenceRunner, "_get_ort_runner", ReferenceRunner.__dict__["_get_ort_runner"]),
             (PrecisionConverter, "_convert_subgraph_precision",
              PrecisionConverter.__dict__["_convert_subgraph_precision"]),
             (HistogramCollector, "merge_histogram", HistogramCollector.__dict__["merge_histogram"]),
             (PrecisionConverter, "_ensure_types_are_defined",
              PrecisionConverter.__dict__["_ensure_types_are_defined"]),
             (autocast_utils, "clear_types_and_shapes_recursive", autocast_utils.clear_types_and_shapes_recursive),
             (PrecisionConverter, "_restore_original_io_metadata",
              PrecisionConverter.__dict__["_restore_original_io_metadata"]),
             (HistogramCollector, "collect", HistogramCollector.__dict__["collect"])]
    utils._reconcile_stale_output_shapes = _reconcile(saved[0][2])
    PrecisionConverter._cleanup_no_consumer_nodes = _cleanup_no_consumer_nodes
    utils.remove_redundant_casts = castindex.remove_redundant_casts
    utils._sync_value_info_elem_type = castindex.indexed_sync(saved[3][2])
    ReferenceRunner._get_ort_runner = _fresh_outputs_runner(saved[4][2])
    PrecisionConverter._convert_subgraph_precision = _stable_node_ids(saved[5][2])
    HistogramCollector.merge_histogram = _wide_merge(saved[6][2])
    PrecisionConverter._ensure_types_are_defined = _ensure_types_are_defined
    autocast_utils.clear_types_and_shapes_recursive = _tensor_types_cleared(saved[8][2])
    PrecisionConverter._restore_original_io_metadata = _fp64_io_cast(saved[9][2])
    HistogramCollector.collect = _split_collect(saved[10][2])
    return saved


@contextlib.contextmanager
def modelopt_workarounds(enabled: bool = True) -> Iterator[bool]:
    """Within the block, ModelOpt runs with the replacements (when ``enabled`` and its version was checked).

    Yields whether they are in place. Threads share one installation, removed when the last block ends.
    """
    if not (enabled and applies()):
        yield False
        return
    with _INSTALLED.held():
        yield True


def _restore(saved: list[tuple[object, str, object]]) -> None:
    for owner, name, value in saved:
        setattr(owner, name, value)


_INSTALLED = HeldWhileAny(_install, _restore)  # one installation for every thread of the process
