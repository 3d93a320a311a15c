"""Running ONNX models on CPU for the gate: one onnxruntime session per model, reused across samples and modes.

Sessions are onnxruntime's with graph optimisations off (the gate judges each node in the precision the ONNX gives
it: onnxruntime fuses MatMul + Mul and so hides an FP16 overflow of the product that another runtime may not fuse
away; with Q/DQ graphs its fusions give wrong FP8 results) and threads that do not spin (``session_options``), run
through Polygraphy's ``OnnxrtRunner``. The FP32 model's session is kept per model file (path, size and modification
time), so it is loaded once however many samples, modes and auto-pin attempts it is compared with; its outputs on a
given set of inputs are kept too, and its every-tensor run on one feed (for auto-pin and the layer-wise search)
while one search needs it. A converted model is run once, so its session is not kept.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from trtfarm.onnxfile import load_model
from trtfarm.precision.memory import weight_tensors
from trtfarm.precision.recipe import GateError, clip

# ops that cannot turn finite inputs into inf/NaN: an FP16 overflow first shows at some other op's output
BOUNDED_OPS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "Softmax", "Resize", "MaxPool",
               "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "Transpose", "Reshape", "Flatten", "Squeeze",
               "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Identity", "Expand", "Tile", "Pad",
               "DepthToSpace", "SpaceToDepth", "Max", "Min", "Abs", "Neg", "Where"}
MAX_SESSIONS = 4
MAX_REFERENCES = 4
_SESSIONS: OrderedDict[tuple, object] = OrderedDict()
_REFERENCE: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()
_ALL_TENSORS: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()  # large: one entry
_LOCK = threading.Lock()  # the caches are shared by threads (a farm worker may gate models concurrently)


def model_key(path: Path) -> tuple:
    """Identity of a model file for the caches: a rewritten file is a new model."""
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_size, st.st_mtime_ns


def feeds_key(feeds: list[dict]) -> str:
    """Content digest of a list of feed dicts."""
    h = hashlib.sha256()
    for feed in feeds:
        for name in sorted(feed):
            a = np.ascontiguousarray(feed[name])
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _remember(cache: OrderedDict, key: tuple, make: Callable, limit: int):
    with _LOCK:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()
    with _LOCK:
        cache[key] = value
        while len(cache) > limit:
            cache.popitem(last=False)
    return value


def with_outputs(path: Path, extra: list[str] | str) -> bytes:
    """The model at ``path`` with intermediate tensors marked as outputs (Polygraphy's MARK_ALL for ``"all"``).

    ``"computed"``: every node output but those made from weights alone (``memory.weight_tensors``).
    """
    from polygraphy import constants
    from polygraphy.backend.onnx import BytesFromOnnx, ModifyOutputs, OnnxFromPath

    model = OnnxFromPath(str(path))()
    if extra == "all":
        marked = ModifyOutputs(model, outputs=constants.MARK_ALL, copy=True)()
    elif extra == "computed":
        weights = weight_tensors(model)
        outputs = [o.name for o in model.graph.output] + [t for n in model.graph.node for t in n.output
                                                           if t and t not in weights]
        marked = ModifyOutputs(model, outputs=list(dict.fromkeys(outputs)), copy=True)()
    else:
        outputs = [o.name for o in model.graph.output] + [t for t in extra if t]
        marked = ModifyOutputs(model, outputs=list(dict.fromkeys(outputs)), copy=True)()
    return BytesFromOnnx(marked)()


def session_options():
    """The options of the gate's onnxruntime sessions: graph optimisations off, threads that sleep when idle.

    As Polygraphy's ``SessionFromOnnx`` sets them, one intra-op and one inter-op thread per CPU this process may
    use; unlike its sessions, idle threads wait without spinning: on a small shared machine a spinning pool burns
    the cores that other work (and the next node of this run) needs, for no result (a quarter to a third of the
    gate's CPU on the 800x608 detector at load 4, and no more wall time).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = options.inter_op_num_threads = len(os.sched_getaffinity(0))
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def session(path: Path, extra: tuple[str, ...] | str = (), keep: bool = True):
    """The onnxruntime CPU session of ``path`` (with ``extra`` tensors as outputs), cached when ``keep``."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # its log (unused initializers, a failed run) is not the user's to
    # read: a failure reaches the user as GateError's one line

    def make():
        source = with_outputs(path, extra) if extra else str(path)
        return ort.InferenceSession(source, sess_options=session_options(), providers=["CPUExecutionProvider"])

    return _remember(_SESSIONS, (model_key(path), extra), make, MAX_SESSIONS) if keep else make()


def _run_errors() -> tuple[type[BaseException], ...]:
    """What Polygraphy and onnxruntime raise when a model cannot be loaded or run (each its own class)."""
    import onnxruntime.capi.onnxruntime_pybind11_state as ort_state
    from polygraphy.exception import PolygraphyException

    ort = tuple(c for c in vars(ort_state).values() if isinstance(c, type) and issubclass(c, Exception))
    return (PolygraphyException, *ort)


def infer(path: Path, feeds: list[dict], extra: tuple[str, ...] | str = (),
          each: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
          step: Callable[[], None] | None = None, keep: bool = True) -> list[dict[str, np.ndarray]]:
    """Run ``path`` on every feed; ``each`` may reduce a feed's outputs before they are kept; ``step`` ticks.

    ``keep``: keep the session for later runs of the same model (the FP32 model), or not (a converted one).
    A model that onnxruntime cannot load or run raises ``GateError``: one line naming the model and the run.
    """
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.CRITICAL + 1  # its errors reach the user as GateError's one line
    results = []
    try:
        with OnnxrtRunner(session(path, extra, keep)) as runner:
            for feed in feeds:
                out = {k: np.asarray(v) for k, v in runner.infer(feed).items()}
                results.append(each(out) if each else out)
                if step:
                    step()
    except _run_errors() as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        watching = " with its FP16 tensors watched for overflow" if extra and extra not in ("all", "computed") \
            else " with every tensor as an output" if extra else ""
        raise GateError(f"{path}: onnxruntime could not run the model{watching} ({type(err).__name__}: "
                        f"{clip(first)}). Fix: check the model runs in onnxruntime on CPU "
                        "(polygraphy run MODEL --onnxrt); keep the failing nodes in FP32 (--keep-fp32 REGEX)") from err
    return results


def stack(parts: list[np.ndarray], axis: int = 0) -> np.ndarray:
    """Concatenate per-feed results along the batch axis (scalars and shape tensors: the first feed's)."""
    return np.concatenate(parts, axis=axis) if parts[0].ndim > axis else parts[0]


def batch_axes_of(path: Path, model: onnx.ModelProto | None = None) -> dict[str, int]:
    """The model's outputs whose batch is not their first axis (a recurrent state's ``[layers, batch, hidden]``).

    ``model``: the model at ``path`` when the caller has read it already (it is not read again).
    """
    from trtfarm.precision.inputs import output_axes

    return output_axes(model if model is not None else load_model(path))


def joined(results: list[dict[str, np.ndarray]], keep_dtype: bool = False,
           axes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Per-feed outputs concatenated over feeds (float32 unless ``keep_dtype``), along ``axes`` or the first."""
    axes = axes or {}
    return {k: stack([r[k] if keep_dtype else np.asarray(r[k], dtype=np.float32) for r in results], axes.get(k, 0))
            for k in results[0]}


def reference(path: Path, feeds: list[dict], step: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
    """FP32 outputs of ``path`` on ``feeds`` (float32, concatenated), computed once per model and feeds."""
    def make():
        return joined(infer(path, feeds, step=step), axes=batch_axes_of(path))

    key = (model_key(path), feeds_key(feeds))
    if key in _REFERENCE and step:
        for _ in feeds:
            step()
    return _remember(_REFERENCE, key, make, MAX_REFERENCES)


def all_tensors(path: Path, feed: dict, keep: bool = True) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Run a model with every intermediate tensor that depends on its inputs marked as an output.

    Tensors made from weights alone are the same on every input and left out (``memory.weight_tensors``: the
    ONNX test zoo's ``ConstantOfShape`` weights, a quantized model's Q/DQ of them; on VGG-19 in INT8 these made the
    layer-wise search of both models hold 3.9 GiB).

    ``keep``: the result is kept for the next call with the same model and feed (the FP32 model during one
    auto-pin search); the session is never kept (one run).
    """
    model = load_model(path)

    def make():
        return infer(path, [feed], extra="computed", keep=False)[0]

    values = _remember(_ALL_TENSORS, (model_key(path), feeds_key([feed])), make, 1) if keep else make()
    return model, values


def run_models(paths: list, feeds: list[dict], keep_dtype: bool = False) -> list[dict[str, np.ndarray]]:
    """Run each model on every feed; outputs concatenated over feeds (sessions not kept)."""
    return [joined(infer(Path(p), feeds, keep=False), keep_dtype, batch_axes_of(Path(p))) for p in paths]


FP16_MAX = 65504.0
QUANTIZED_SPAN = {onnx.TensorProto.INT8: 255, onnx.TensorProto.UINT8: 255, onnx.TensorProto.INT4: 15,
                  onnx.TensorProto.UINT4: 15, onnx.TensorProto.INT16: 65535, onnx.TensorProto.UINT16: 65535}


def bounded_dequantize(model: onnx.ModelProto, types: dict[str, int]) -> set[str]:
    """Outputs of ``DequantizeLinear`` nodes that cannot leave FP16's range, whatever their integer input holds.

    A DQ computes ``(q - zero_point) * scale``: with a constant, finite scale and an integer input, ``|q -
    zero_point|`` is at most the span of the input's type (255 for INT8), so an output whose ``span * max|scale|``
    stays below FP16's largest value cannot overflow. ``types``: element types by tensor name.
    """
    constants = {i.name: i for i in model.graph.initializer}
    constants.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant"
                      for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR})
    found = set()
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or len(node.input) < 2 or node.input[1] not in constants:
            continue
        span = QUANTIZED_SPAN.get(types.get(node.input[0]))
        scale = np.abs(onnx.numpy_helper.to_array(constants[node.input[1]]).astype(np.float64))
        if span and scale.size and np.isfinite(scale).all() and span * scale.max() < FP16_MAX:
            found.add(node.output[0])
    return found


def low_precision_tensors(path: Path, model: onnx.ModelProto | None = None) -> tuple[str, ...] | str:
    """FP16 intermediate tensors where an overflow can first appear, or "all" where ONNX type inference fails.

    Outputs of ``BOUNDED_OPS`` are left out: they only pass on an overflow that an earlier tensor already shows,
    and marking fewer tensors keeps the run's memory and time down. So are constants (``Constant`` nodes'
    outputs, initializers): only computed tensors can be returned as outputs, and a constant cannot overflow at run
    time (Paddle2ONNX writes every weight as a ``Constant`` node); and ``DequantizeLinear`` outputs whose constant
    scale keeps them inside FP16's range (``bounded_dequantize``). ``model``: the model at ``path``, if read already.
    """
    model = model if model is not None else load_model(path)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:
        return "all"  # every tensor is marked and the FP16 ones are picked by their runtime dtype
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.input]}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    fp16 = {name for name, t in types.items() if t == onnx.TensorProto.FLOAT16}
    outputs = {o.name for o in model.graph.output} | bounded_dequantize(model, types)
    skip = BOUNDED_OPS | {"Constant"}
    return tuple(t for n in model.graph.node if n.op_type not in skip for t in n.output
                 if t in fp16 and t not in outputs)
