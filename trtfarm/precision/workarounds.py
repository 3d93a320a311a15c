"""trtfarm's replacements of ModelOpt's and onnxruntime's private functions, while a conversion runs.

Each replaces one function of the versions in ``library_versions.COMPARED`` (nvidia-modelopt 0.47.0, onnxruntime 1.32.0,
Polygraphy 0.53.6) and says in its docstring which function, on which version, and what behaviour of it it covers:

- costs that grow with the model, most of the step's CPU on PP-OCRv4's detector (672 nodes, three dynamic input
  dimensions) on a 2-core machine (bench/precision_speed.py prints the step with and without them):
  ``_reconcile`` (1), ``_cleanup_no_consumer_nodes`` (2), ``castindex`` (3: ``remove_redundant_casts`` and
  ``_sync_value_info_elem_type`` with indexed lookups), ``_fresh_outputs_runner`` (4), ``histograms`` (10);
- failures of ModelOpt's or onnxruntime's functions on valid models: ``_stable_node_ids`` (5), ``histograms`` (6),
  ``_arrays_only`` (7), ``_tensor_types_cleared`` and ``_ensure_types_are_defined`` (8), ``_fp64_io_cast`` (9).

Each gives the model ModelOpt gives, byte for byte, where ModelOpt's own function succeeds (tests/precision/
test_workarounds.py compares each with ModelOpt's own function on real models, test_castindex.py on generated cast
graphs), and changes only what ModelOpt's own function fails on (test_sequences.py, test_third_party.py).

They are in place only within ``modelopt_workarounds`` (convert.py's adapter holds it around each ModelOpt call),
and only in the precision step's own process (``child``): none outlives the step. That process runs only on the
versions compared, or with ``--unchecked-modelopt`` (``library_versions``): then they are installed all the same, and a
version that lacks a function they replace is refused with one line. ``modelopt_as_shipped`` runs ModelOpt's own
functions instead: the referee the tests compare the replacements with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trtfarm.errors import UserInputError
from trtfarm.precision.deferred import import_modelopt
from trtfarm.precision.held import HeldWhileAny
from trtfarm.precision.library_versions import COMPARED, FLAG, installed


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
    """1. ModelOpt 0.47.0's ``utils._reconcile_stale_output_shapes``, skipped where it would change nothing.

    Before AutoCast's reference run, and before quantizing, ModelOpt re-derives the graph outputs' shapes with
    onnxruntime's symbolic shape inference to repair an output declared with a stale rank. On symbolic input sizes its
    sympy simplification of a strided Conv stack and a Resize grows with the model's depth (8-9 s of CPU on that
    detector; 0.1 s with the same sizes as numbers). ONNX's own shape inference (C++, milliseconds) is asked first
    (``_declared_shapes_hold``): when it confirms every output's declared rank and sizes, no declaration is stale and
    ModelOpt's function is not called; otherwise it runs as it is.
    """

    def reconcile_stale_output_shapes(model) -> int:
        """ModelOpt's reconciliation, skipped when ONNX's inference confirms every declared output shape."""
        return 0 if _declared_shapes_hold(model) else original(model)

    return reconcile_stale_output_shapes


def _cleanup_no_consumer_nodes(self) -> None:
    """2. ``PrecisionConverter._cleanup_no_consumer_nodes`` (nvidia-modelopt 0.47.0), the consumed names read once.

    AutoCast's cleanup (int8/fp8 quantization runs it too) finds the nodes whose outputs nothing reads by scanning
    every node's inputs for every output of every node: quadratic in the nodes (7 s of CPU on that detector's fp16
    conversion, 12 s on int8). This collects the tensor names the nodes read once and removes the same nodes in the
    same order.
    """
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

    Polygraphy's ``Comparator.run`` (polygraphy 0.53.6) deep-copies every run's outputs when there are several runs,
    because a runner may reuse its output buffers (TensorRT's do); onnxruntime's ``InferenceSession.run`` returns new
    arrays every time, so the copy is a copy of memory no one else can change. The copy of this mapping is a new
    mapping of the same arrays.
    """

    def __deepcopy__(self, memo: dict) -> _FreshOutputs:
        return _FreshOutputs(self)


def _fresh(infer):
    def fresh_infer(feed_dict, *args, **kwargs):
        return _FreshOutputs(infer(feed_dict, *args, **kwargs))

    return fresh_infer


def _fresh_outputs_runner(get_ort_runner):
    """4 and 7. ModelOpt 0.47.0's ``ReferenceRunner._get_ort_runner``: its runs' arrays handed on, uncopied.

    4: AutoCast's reference run goes through Polygraphy's ``Comparator``, which deep-copies each run's outputs
    (``_FreshOutputs``); the run marks every tensor as an output: at 800x608 that copy was 3 s of CPU and a gigabyte.
    7: ``_arrays_only``.
    """

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
    """7. Sequences in AutoCast's reference run (nvidia-modelopt 0.47.0 with polygraphy 0.53.6): its arrays only.

    The run marks every tensor as an output, a sequence too (``SequenceConstruct``, ``SplitToSequence``); onnxruntime
    returns a sequence as a Python list, which Polygraphy's ``Comparator`` cannot describe ("dtype is unsupported for
    objects of type: list"). A tensor missing from the reference data is one AutoCast's range rule does not judge (as
    a graph input); the sequence's elements are judged where they come out of it as tensors (``SequenceAt``,
    ``ConcatFromSequence``). A model without sequences gets every output.
    """

    def arrays_only_infer(feed_dict, *args, **kwargs):
        outputs = infer(feed_dict, *args, **kwargs)
        if all(_is_array(value) for value in outputs.values()):
            return outputs
        return {name: value for name, value in outputs.items() if _is_array(value)}  # a sequence is a list

    return arrays_only_infer


def _is_array(value) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape")


def _tensor_types_cleared(clear):
    """8. ``modelopt.onnx.autocast.utils.clear_types_and_shapes_recursive`` (nvidia-modelopt 0.47.0), sequences kept.

    After casting, AutoCast clears every ``value_info``'s type for ONNX's inference to give again, writing the tensor
    element type: on a sequence's ``value_info`` (which has no tensor type) that write makes it a tensor, and
    onnxruntime refuses the converted model ("Type (tensor(float16)) of output arg (seq_1) ... does not match
    expected type (seq(tensor(float16)))"). A sequence's, a map's or an optional's ``value_info`` is dropped first
    (ONNX's inference gives it again); every tensor's gets what ModelOpt's function gives it.
    """

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
    """8. ``PrecisionConverter._ensure_types_are_defined`` (nvidia-modelopt 0.47.0), non-tensor types left alone.

    ModelOpt gives each ``value_info`` still undefined after inference the low-precision type by writing its tensor
    element type, which makes a sequence's a tensor (as ``_tensor_types_cleared`` says); tensors get what it gives.
    """
    for vi in self.model.graph.value_info:
        if vi.type.WhichOneof("value") not in (None, "tensor_type"):
            continue
        if vi.type.tensor_type.elem_type == 0:  # onnx.TensorProto.UNDEFINED
            vi.type.tensor_type.elem_type = self.low_precision_type.onnx_type


def _fp64_io_cast(restore):
    """9. ``PrecisionConverter._restore_original_io_metadata`` (nvidia-modelopt 0.47.0), after Casts at FP64 I/O.

    AutoCast's sanitizer declares a graph's FP64 inputs and outputs FP32 (``GraphSanitizer._convert_fp64_io_types``);
    with ``keep_io_types`` this last step puts the declared types back and refuses its own model when an element type
    changed ("element type changed", onnx's ``test_sequence_model7``). Before it, each such input gets a Cast to the
    type the converted model reads it in, and each such output a Cast to FP64 where the model writes it, so the types
    it puts back are the model's; a model without FP64 inputs or outputs is left to ModelOpt's step as it is.
    """

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
    """5. ``PrecisionConverter._convert_subgraph_precision`` (nvidia-modelopt 0.47.0), node identities held.

    On an If branch or a Loop body ModelOpt classifies each node by ``id(node)`` in one pass over ``subgraph.node``
    and looks the ids up in later passes. protobuf's upb runtime makes a new Python object for an element whenever
    none is alive: a node nothing kept between passes (a Constant with no inputs) comes back with another id, and the
    lookup ends in a ``KeyError`` (silero-vad's If branches, at precisionconverter.py:1092). Every node's object is
    kept alive while ModelOpt's function runs; the function itself is unchanged.
    """

    def _convert_subgraph_precision(self, subgraph, *args, **kwargs):
        """ModelOpt's function with the subgraph's node objects held, so ``id(node)`` is the same in every pass."""
        held = list(subgraph.node)
        try:
            return convert(self, subgraph, *args, **kwargs)
        finally:
            del held

    return _convert_subgraph_precision


def _install() -> list[tuple[object, str, object]]:
    """Put every replacement in place; what it replaced, to put back (``_restore``).

    3 is ``castindex``'s: ModelOpt 0.47.0's ``utils.remove_redundant_casts`` and ``utils._sync_value_info_elem_type``
    asked which nodes read and write each Cast's tensors by scanning the graph each time (4-6 s of CPU on that
    detector at 800x608), answered from an index instead.
    """
    import_modelopt()  # first, whoever enters the block: lief and torch loaded only when read (``deferred``)
    from modelopt.onnx import utils
    from modelopt.onnx.autocast import utils as autocast_utils
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter
    from modelopt.onnx.autocast.referencerunner import ReferenceRunner
    from onnxruntime.quantization.calibrate import HistogramCollector

    from trtfarm.precision import castindex
    from trtfarm.precision.histograms import split_collect, wide_merge

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
    HistogramCollector.merge_histogram = wide_merge(saved[6][2])
    PrecisionConverter._ensure_types_are_defined = _ensure_types_are_defined
    autocast_utils.clear_types_and_shapes_recursive = _tensor_types_cleared(saved[8][2])
    PrecisionConverter._restore_original_io_metadata = _fp64_io_cast(saved[9][2])
    HistogramCollector.collect = split_collect(saved[10][2])
    return saved


@contextlib.contextmanager
def modelopt_workarounds() -> Iterator[bool]:
    """Within the block, ModelOpt runs with the replacements (unless ``modelopt_as_shipped`` holds them off).

    Yields whether they are in place. Threads share one installation, removed when the last block ends.
    """
    if _SHIPPED.count:
        yield False
        return
    with _INSTALLED.held():
        yield True


@contextlib.contextmanager
def modelopt_as_shipped() -> Iterator[None]:
    """Within the block (entered outside any ``modelopt_workarounds``), ModelOpt's own functions run, none replaced.

    The referee the tests and bench/precision_speed.py compare the replacements with; in the step's own process:
    ``convert_and_gate(..., workarounds=False)``.
    """
    with _SHIPPED.held():
        yield


def _installed_or_refused() -> list[tuple[object, str, object]]:
    """``_install()``; one line naming what is missing when a version run unchecked lacks a function it replaces."""
    try:
        return _install()
    except (KeyError, AttributeError, ImportError) as err:
        version = installed("nvidia-modelopt")
        raise UserInputError(f"nvidia-modelopt {version} ({FLAG}) lacks what one of trtfarm's workarounds replaces "
                             f"({type(err).__name__}: {err}): install nvidia-modelopt=={COMPARED['nvidia-modelopt']}, "
                             "the version they were compared with") from err


def _restore(saved: list[tuple[object, str, object]]) -> None:
    for owner, name, value in saved:
        setattr(owner, name, value)


_INSTALLED = HeldWhileAny(_installed_or_refused, _restore)  # one installation for every thread of the process
_SHIPPED = HeldWhileAny(lambda: None, lambda _: None)  # blocks of modelopt_as_shipped open now
