"""Conversion with ModelOpt, on CPU: AutoCast for FP16/BF16, ONNX quantization (Q/DQ) for INT8/FP8.

ModelOpt is imported only here, when a conversion runs (torch, which it imports, only if fp8 reads it:
``deferred``). This is ModelOpt's adapter: the model is
normalised first (``normalise``: what its converters cannot take), both converters get the step's own inputs (the
gate's feeds for AutoCast's reference run, the calibration feeds for quantization), and whatever ModelOpt, or a
library it calls (onnxruntime, onnx, ONNX-GraphSurgeon), raises is turned here into one line naming that library,
where it raised, its reason, and a fix that fits the reason. An error raised in trtfarm's own code keeps its
traceback. AutoCast's reasons for each node it keeps in FP32 are read from its log as it converts. Where AutoCast
fails on a model with control flow, its main graph is converted alone and the If/Loop/Scan nodes stay FP32 with
their subgraphs (``controlflow``), and a note says so. Two of ModelOpt's costs that grow with the model are worked
around while it converts (``workarounds``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from trtfarm.errors import UserInputError, first_line, library_failure
from trtfarm.identity import onnx_digest
from trtfarm.onnxfile import load_model
from trtfarm.precision.controlflow import main_graph_converted, refused_by_onnxruntime
from trtfarm.precision.deferred import import_modelopt
from trtfarm.precision.nodes import NodePrecision, node_precision
from trtfarm.precision.normalise import normalised_for_converters
from trtfarm.precision.pin32 import pins_in_fp32, sequences_started_empty
from trtfarm.precision.recipe import Recipe, clip
from trtfarm.precision.workarounds import modelopt_workarounds
from trtfarm.scratch import scratch_dir

AUTOCAST = {"fp16", "bf16"}
REFERENCE_BATCHES = 4
QUANTIZE = {"int8", "fp8"}
# control flow whose body AutoCast (ModelOpt 0.47) leaves FP32 after casting its loop-carried inputs to FP16, which
# onnxruntime then refuses (MatMul bound to float16 and float): kept in FP32 whole. An If's branches it casts right.
LOOPS = {"Loop", "Scan"}


class ConversionError(UserInputError):
    """ModelOpt could not convert the model; the message says why and what to change."""


@dataclass(frozen=True)
class Converted:
    """A converted ONNX file, its content address, what was normalised, and AutoCast's reasons per FP32 node."""

    path: Path
    digest: str
    seconds: float
    notes: tuple[str, ...] = ()
    nodes: NodePrecision = field(default_factory=NodePrecision)


class _Reasons(logging.Handler):
    """AutoCast's log lines that say why a node stays in high precision (``Skipping node X: ...``)."""

    SKIP = re.compile(r"^Skipping node (?P<node>.+?): (?P<why>.+)$", re.S)
    MOVED = re.compile(r"^Node (?P<node>.+?) \(op type: (?P<op>\w+)\) is not supported in low precision")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.kept: dict[str, str] = {}
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102 - logging's callback
        text = record.getMessage()
        if m := self.SKIP.match(text):
            self.kept.setdefault(m["node"], _rule_text(m["why"]))
        elif m := self.MOVED.match(text):
            self.kept.setdefault(m["node"], f"AutoCast: {m['op']} has no FP16 form at this opset")
        elif record.levelno >= logging.ERROR:
            self.errors.append(text)


def _rule_text(why: str) -> str:
    if why.startswith("reference IO out of range"):
        absmax = re.search(r"absmax=([-0-9.e+inf]+)", why)
        limit = re.search(r"range=\[-?([0-9.e+inf]+)", why)
        found = f" |x| up to {float(absmax[1]):.4g}" if absmax else ""
        return f"AutoCast data_max:{found} beyond {limit[1] if limit else 'data_max'} on the reference run"
    if why.startswith("initializer"):
        name = why.split(":", 1)[0].removesuffix(" out of range")
        return f"AutoCast init_max: {name} holds values beyond FP16's range"
    return {"DisabledNodeNameRegexRule": "pinned: matches --keep-fp32", "DisabledOpTypes": "pinned: --keep-fp32-op",
            "DepthOfReductionRule": "AutoCast: reduction too deep for FP16"}.get(why.strip(), f"AutoCast: {why}")


@contextlib.contextmanager
def _modelopt_log() -> Iterator[_Reasons]:
    """ModelOpt prints and logs a lot (INFO per node): keep the terminal for trtfarm, and read its reasons."""
    previous = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    reasons = _Reasons()
    loggers = [logging.getLogger(n) for n in ("modelopt.onnx", "modelopt.onnx.autocast")]
    saved = [(lg, lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    for lg in loggers:
        lg.handlers, lg.propagate = [reasons], False
        lg.setLevel(logging.DEBUG)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), _no_stray_file():
            yield reasons
    finally:
        for lg, level, propagate, handlers in saved:
            lg.handlers, lg.propagate = handlers, propagate
            lg.setLevel(level)
        logging.disable(previous)


STRAY = "sym_shape_infer_temp.onnx"  # onnxruntime's symbolic shape inference, which ModelOpt calls, writes this
# into the working directory when it cannot infer every shape, then raises (ModelOpt carries on without it)


@contextlib.contextmanager
def _no_stray_file() -> Iterator[None]:
    """Remove the file onnxruntime's shape inference leaves in the user's working directory during a conversion."""
    stray = Path.cwd() / STRAY
    before = stray.stat().st_mtime_ns if stray.exists() else None
    try:
        yield
    finally:
        if stray.exists() and (before is None or stray.stat().st_mtime_ns != before):
            with contextlib.suppress(OSError):
                stray.unlink()


def _write_feeds(feeds: list[dict], folder: Path) -> Path:
    """AutoCast's reference inputs: one ``.npz`` per batch in a folder (its multi-batch form)."""
    folder.mkdir()
    for i, feed in enumerate(feeds):
        np.savez(folder / f"{i:05d}.npz", **feed)
    return folder


def _autocast(src: Path, out: Path, recipe: Recipe, feeds: list[dict] | None, work: Path, named: Path,
              notes: list[str]) -> dict[str, str]:
    """AutoCast of ``src`` into ``out``, its Loops and Scans kept FP32 (AutoCast casts their inputs, not bodies)."""
    loops = {n.name: n.op_type for n in load_model(src, weights=False).graph.node if n.op_type in LOOPS}
    kept, whole = _converted(src, out, recipe, feeds[:REFERENCE_BATCHES] if feeds else None, work, named, notes,
                             lambda path, data, folder, dest: _mixed(path, dest, recipe, data, folder,
                                                                     set(loops.values())))
    return {**kept, **{name: f"kept in FP32 with its body: AutoCast casts a {op}'s loop-carried inputs but not its "
                             "body" for name, op in loops.items() if whole and op not in recipe.keep_fp32_ops}}


def _mixed(src: Path, out: Path, recipe: Recipe, feeds: list[dict] | None, folder: Path,
           ops: set[str] = frozenset()) -> dict[str, str]:
    """``convert_to_mixed_precision`` with the recipe's pins, ``ops`` and empty-started sequences in FP32."""
    import_modelopt()  # lief and torch (it imports them; fp8 alone reads torch) loaded only when read
    from modelopt.onnx.autocast import convert_to_mixed_precision

    sequences = sequences_started_empty(load_model(src, weights=False))
    exclude = [*recipe.keep_fp32, *(f"^{re.escape(name)}$" for name in sequences)]
    model = convert_to_mixed_precision(
        onnx_path=str(src), low_precision_type=recipe.mode, nodes_to_exclude=exclude or None,
        op_types_to_exclude=[*recipe.keep_fp32_ops, *ops] or None, data_max=recipe.data_max,
        init_max=recipe.init_max, keep_io_types=True, providers=["cpu"],
        calibration_data=str(_write_feeds(feeds, folder)) if feeds else None)
    onnx.save(model, str(out))
    return sequences


def _converted(src: Path, out: Path, recipe: Recipe, feeds: list[dict] | None, work: Path, named: Path,
               notes: list[str], convert: Callable, calibration: bool = False) -> tuple[dict[str, str], bool]:
    """``convert(src, feeds, folder, out)``, ModelOpt's conversion: what it raises is said in one line.

    Where it fails on a model with control flow, or writes one that onnxruntime cannot load, the main graph is
    converted alone and the control flow kept FP32 (``controlflow``). Returns the reasons per FP32 node and whether
    the model was converted whole; a note says what was not.
    """
    said = None
    import_modelopt()  # its import sets its own loggers up: done before ours replace them, so that AutoCast's
    import modelopt.onnx.autocast  # noqa: F401 - reasons (data_max, init_max, ...) reach the handler that reads them
    with _modelopt_log() as log, modelopt_workarounds():
        try:
            kept = convert(src, feeds, work / "reference", out)
            if (refused := refused_by_onnxruntime(out, src)) is None:
                return {**log.kept, **kept}, True
            library, failure = "ModelOpt", f"onnxruntime cannot load the model it wrote: {clip(refused)}"
        except Exception as err:  # only what ModelOpt's (or its libraries') code raised is translated
            if (said := _translated(err, recipe, named, log.errors, bool(feeds), calibration)) is err:
                raise
            library, where = library_failure(err)
            failure, cause = f"{type(err).__name__} at {where}: {clip(first_line(err))}", err
        log.kept.clear()
        try:
            done = main_graph_converted(src, out, feeds, work, lambda path, data, dest: convert(
                path, data, work / "reference-main", dest))
        except Exception as err:  # what ModelOpt raised, or a refusal: the whole model's failure is said
            if not (isinstance(err, UserInputError) or library_failure(err)):
                raise
            done = None
    if done is None and said is not None:
        raise said from cause
    if done is None:  # onnxruntime's refusal of the whole model is the gate's to say
        return kept, True
    reasons, note = done[0].said(recipe.mode, library, failure)
    notes.append(note)
    return {**log.kept, **done[1], **reasons}, False


class _Feeds:
    """onnxruntime's ``CalibrationDataReader`` over the calibration feeds (scalars given whole with each batch)."""

    def __init__(self, feeds: list[dict]) -> None:
        self.feeds, self.at = feeds, 0

    def get_next(self) -> dict | None:  # noqa: D102 - onnxruntime's interface
        self.at += 1
        return self.feeds[self.at - 1] if self.at <= len(self.feeds) else None

    def get_first(self) -> dict:  # noqa: D102 - ModelOpt's addition to it
        return self.feeds[0]

    def rewind(self) -> None:  # noqa: D102
        self.at = 0

    def set_range(self, start_index: int, end_index: int) -> None:  # noqa: D102
        self.at = start_index


def _quantize(src: Path, out: Path, recipe: Recipe, feeds: list[dict] | None, work: Path, named: Path,
              notes: list[str]) -> dict[str, str]:
    if not feeds:
        raise ConversionError(f"{recipe.mode} quantization needs calibration data: pass --calibration calib.npz "
                              "(a numpy .npz keyed by input name, a few hundred realistic samples), or put calib.npz "
                              "beside the model")
    return _converted(src, out, recipe, feeds, work, named, notes,
                      lambda path, data, folder, dest: _quantized(path, dest, recipe, data), calibration=True)[0]


def _quantized(src: Path, out: Path, recipe: Recipe, feeds: list[dict]) -> dict[str, str]:
    """ModelOpt's ``quantize`` with the recipe's pins (then in FP32: ``pin32``) and empty-started sequences."""
    import_modelopt()  # lief and torch (it imports them; fp8 alone reads torch) loaded only when read
    from modelopt.onnx.quantization import quantize
    from onnxruntime.quantization import CalibrationDataReader

    sequences = sequences_started_empty(load_model(src, weights=False), "quantization's FP16 pass")
    reader = type("CalibrationFeeds", (_Feeds, CalibrationDataReader), {})(feeds)
    # copies: ModelOpt extends the lists it is given (its GEMV MatMuls), which are the recipe's
    quantize(onnx_path=str(src), quantize_mode=recipe.mode, calibration_data_reader=reader, calibration_eps=["cpu"],
             output_path=str(out), nodes_to_exclude=[*recipe.keep_fp32, *(f"^{re.escape(n)}$" for n in sequences)]
             or None, op_types_to_exclude=[*recipe.keep_fp32_ops] or None, log_level="WARNING")
    pins_in_fp32(src, out, recipe, sequences)
    return sequences


def _translated(err: Exception, recipe: Recipe, src: Path, logged: list[str], data: bool,
                calibration: bool = False) -> Exception:
    """``err`` as one line naming the library that raised it and a fix for its reason; a trtfarm bug unchanged."""
    if isinstance(err, UserInputError):
        return err
    found = library_failure(err)
    if found is None:
        return err
    library, where = found
    reason = first_line(err)
    ort = next((line for text in logged for line in text.splitlines() if "[ONNXRuntimeError]" in line), "")
    if ort or where.startswith("onnxruntime/"):  # its reference or calibration run on the step's inputs
        what = "the calibration data" if calibration else "the held-out data" if data else "the generated inputs"
        fix = ("check calib.npz against the model's inputs (names, shapes, value ranges)" if calibration else
               "pass real inputs (--heldout heldout.npz; int8/fp8: --calibration calib.npz)")
        return ConversionError(f"{src}: {recipe.mode} conversion stopped in {library}'s run of the FP32 model on "
                               f"{what}: onnxruntime refused it ({clip(ort or reason)}). Fix: {fix}")
    if "valid ONNX" in reason or where.startswith("onnx/"):
        fix = "re-export the model at opset 13 or later with a current exporter, or keep it fp32"
    else:  # a pin of the node it names is no fix: it may be one ModelOpt added, or inside a subgraph
        fix = f"keep this model fp32 (ModelOpt cannot {recipe.mode}-convert it), and report the model to ModelOpt"
    detail = f" ({clip(logged[-1].splitlines()[0], 200)})" if logged and "See log" in reason else ""
    return ConversionError(f"{src}: {recipe.mode} conversion failed in {library} ({type(err).__name__} at {where}: "
                           f"{clip(reason)}{detail}). Fix: {fix}")


# onnxruntime's integer quantization: its own operators, which neither ModelOpt nor TensorRT's parser takes
ORT_QUANTIZED_OPS = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                     "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                     "QLinearGlobalAveragePool", "QLinearConcat", "QGemm", "DynamicQuantizeMatMul",
                     "MatMulIntegerToFloat", "DynamicQuantizeLSTM"}


# ONNX's own quantization: a quantized export, or ModelOpt's int8/fp8 output
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


def _counted(ops: list[str]) -> str:
    return ", ".join(f"{op} x{ops.count(op)}" for op in sorted(set(ops)))


def refuse_unconvertible(src: Path, model: onnx.ModelProto, recipe: Recipe) -> None:
    """``ConversionError`` (one line) for a model no conversion starts from; checked before any data is read.

    Already quantized (onnxruntime's operators, or Q/DQ nodes), or holding ``ai.onnx.ml`` operators.
    """
    if recipe.mode == "fp32":
        return
    nodes = model.graph.node
    ort = [n.op_type for n in nodes if n.op_type in ORT_QUANTIZED_OPS
           or n.domain == "com.microsoft" and n.op_type.startswith(("QLinear", "DynamicQuantize"))]
    if ort:
        raise ConversionError(f"{src}: the model is already quantized with onnxruntime's operators ({_counted(ort)}); "
                              f"{recipe.mode} conversion starts from an FP32 model, and TensorRT cannot build these "
                              "operators. Fix: give the FP32 export (the model before quantize_dynamic)")
    qdq = [n.op_type for n in nodes if n.op_type in QDQ_OPS and n.domain in ("", "ai.onnx")]
    if qdq:
        raise ConversionError(f"{src}: the model is already quantized ({_counted(qdq)}); {recipe.mode} conversion "
                              "starts from an FP32 model. Fix: give the FP32 export, or build this one as it is "
                              "(precision fp32: TensorRT builds its Q/DQ nodes)")
    ml = [n.op_type for n in nodes if n.domain == "ai.onnx.ml"]
    if ml:
        raise ConversionError(f"{src}: the model has ai.onnx.ml operators ({_counted(ml)}), which ModelOpt cannot "
                              f"{recipe.mode}-convert and TensorRT cannot build. Fix: export the network without "
                              "them (run that step outside the model)")


def convert_onnx(src: Path, recipe: Recipe, out: Path, *, feeds: list[dict] | None = None) -> Converted:
    """Convert ``src`` by ``recipe`` into ``out`` (checked with onnx.checker); fp32 returns ``src`` itself.

    ``feeds``: AutoCast's reference inputs (the gate's), or the calibration batches for int8/fp8.
    """
    start = time.perf_counter()
    if recipe.mode == "fp32":
        return Converted(Path(src), onnx_digest(Path(src)), 0.0)
    refuse_unconvertible(Path(src), load_model(src), recipe)
    out.parent.mkdir(parents=True, exist_ok=True)
    kept: dict[str, str] = {}
    with scratch_dir("trtfarm-convert-") as tmp:  # quantize() rewrites its input file: it gets this copy
        clean, notes = normalised_for_converters(Path(src), tmp / "model.onnx")
        convert = _autocast if recipe.mode in AUTOCAST else _quantize
        kept = convert(clean, out, recipe, feeds, tmp, Path(src), notes)
        try:
            onnx.checker.check_model(str(out))
        except onnx.checker.ValidationError as err:
            raise ConversionError(f"{src}: ModelOpt's {recipe.mode} conversion wrote a model that fails onnx.checker "
                                  f"({clip(first_line(err))}). Fix: keep the model fp32, and report it to ModelOpt") \
                from err
        nodes = node_precision(clean, out, recipe.mode, kept, keep_fp32=recipe.keep_fp32,
                               keep_fp32_ops=recipe.keep_fp32_ops)
    return Converted(out, onnx_digest(out), time.perf_counter() - start, tuple(notes), nodes)
