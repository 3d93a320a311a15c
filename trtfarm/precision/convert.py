"""Conversion with ModelOpt, on CPU: AutoCast for FP16/BF16, ONNX quantization (Q/DQ) for INT8/FP8.

ModelOpt and torch are imported only here, when a conversion runs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from trtfarm.errors import UserInputError, first_line
from trtfarm.identity import onnx_digest
from trtfarm.precision.recipe import Recipe
from trtfarm.scratch import scratch_dir

AUTOCAST = {"fp16", "bf16"}
QUANTIZE = {"int8", "fp8"}


# ModelOpt reports an unconvertible model with these; anything else (TypeError, KeyError, ...) is a bug and keeps
# its traceback
_CONVERSION_ERRORS = (ValueError, RuntimeError, AssertionError, NotImplementedError, onnx.checker.ValidationError,
                      onnx.shape_inference.InferenceError)


class ConversionError(UserInputError):
    """ModelOpt could not convert the model; the message says why and what to change."""


@dataclass(frozen=True)
class Converted:
    """A converted ONNX file and its content address."""

    path: Path
    digest: str
    seconds: float


def _strip_value_info(src: Path, dest: Path) -> Path:
    """AutoCast defect: value_info from dynamo exports carries 'unk' dims that break onnxruntime. Drop it."""
    model = onnx.load(str(src))
    del model.graph.value_info[:]
    onnx.save(model, str(dest))
    return dest


@contextlib.contextmanager
def _quiet():
    """ModelOpt logs and prints a lot (INFO per node); keep the user's terminal for trtfarm's own output."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(previous)


def _generated_calibration(src: Path, dest: Path) -> Path:
    """Inputs with realistic structure (padding masks, ids in the vocabulary) for AutoCast's reference run.

    Without them AutoCast draws its own random inputs: an all-ones attention mask hides the -3.4e38 that a padded
    one adds before the softmax, so ``data_max`` converts that Add to FP16, where it overflows to -inf.
    """
    from trtfarm.precision.inputs import generate_inputs

    np.savez(dest, **generate_inputs(onnx.load(str(src), load_external_data=False), samples=16, seed=11))
    return dest


def _autocast(src: Path, out: Path, recipe: Recipe, calibration: Path | None) -> None:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    with scratch_dir("trtfarm-convert-") as tmp, _quiet():
        calibration = calibration or _generated_calibration(src, tmp / "calib.npz")
        clean = _strip_value_info(src, tmp / "model.onnx")
        model = convert_to_mixed_precision(
            onnx_path=str(clean), low_precision_type=recipe.mode, nodes_to_exclude=recipe.keep_fp32 or None,
            op_types_to_exclude=recipe.keep_fp32_ops or None, data_max=recipe.data_max, init_max=recipe.init_max,
            keep_io_types=True, calibration_data=str(calibration) if calibration else None, providers=["cpu"])
    onnx.save(model, str(out))


def _quantize(src: Path, out: Path, recipe: Recipe, calibration: dict[str, np.ndarray] | None) -> None:
    if calibration is None:
        raise ConversionError(f"{recipe.mode} quantization needs calibration data: pass --calibration calib.npz "
                              "(a numpy .npz keyed by input name, a few hundred realistic samples), or put calib.npz "
                              "beside the model")
    from modelopt.onnx.quantization import quantize

    with scratch_dir("trtfarm-convert-") as tmp, _quiet():  # quantize() rewrites its input file: give it a copy
        copy = _strip_value_info(src, tmp / "model.onnx")
        quantize(onnx_path=str(copy), quantize_mode=recipe.mode, calibration_data=calibration,
                 calibration_eps=["cpu"], output_path=str(out), nodes_to_exclude=recipe.keep_fp32 or None,
                 op_types_to_exclude=recipe.keep_fp32_ops or None, log_level="WARNING")


# onnxruntime's integer quantization: its own operators, which neither ModelOpt nor TensorRT's parser takes
ORT_QUANTIZED_OPS = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                     "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                     "QLinearGlobalAveragePool", "QLinearConcat", "QGemm", "DynamicQuantizeMatMul",
                     "MatMulIntegerToFloat", "DynamicQuantizeLSTM"}


def _refuse_quantized(src: Path, recipe: Recipe) -> None:
    found: dict[str, int] = {}
    for node in onnx.load(str(src), load_external_data=False).graph.node:
        if node.op_type in ORT_QUANTIZED_OPS:
            found[node.op_type] = found.get(node.op_type, 0) + 1
    if found:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(found.items()))
        raise ConversionError(f"{src}: the model is already quantized with onnxruntime's operators ({ops}); "
                              f"{recipe.mode} conversion starts from an FP32 model, and TensorRT cannot build these "
                              "operators. Fix: give the FP32 export (the model before quantize_dynamic)")


def convert_onnx(src: Path, recipe: Recipe, out: Path, *, calibration_path: Path | None = None,
                 calibration: dict[str, np.ndarray] | None = None) -> Converted:
    """Convert ``src`` by ``recipe`` into ``out`` (checked with onnx.checker); fp32 returns ``src`` itself."""
    start = time.perf_counter()
    if recipe.mode == "fp32":
        return Converted(Path(src), onnx_digest(Path(src)), 0.0)
    _refuse_quantized(Path(src), recipe)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        if recipe.mode in AUTOCAST:
            _autocast(Path(src), out, recipe, calibration_path)
        else:
            _quantize(Path(src), out, recipe, calibration)
        onnx.checker.check_model(str(out))
    except UserInputError:
        raise
    except _CONVERSION_ERRORS as err:  # what ModelOpt and onnx raise when a model/recipe does not convert
        first = first_line(err)
        raise ConversionError(f"{src}: {recipe.mode} conversion failed ({type(err).__name__}: {first}). Fix: check "
                              "the model runs in onnxruntime, the calibration data matches its inputs, or keep the "
                              "failing nodes in FP32 (--keep-fp32 REGEX).") from err
    return Converted(out, onnx_digest(out), time.perf_counter() - start)
