"""How one output of a converted model (or an engine) compares with FP32, and what the gate accepts.

Two figures judge an output, both measured and both reported:

- **Error against the output's scale**: max |converted - FP32| divided by the output's range: the range the recipe
  declares (``output_ranges`` in farm.yaml), else the one its last operator implies (Sigmoid and Softmax: [0, 1];
  Tanh: [-1, 1]), else the FP32 reference's own dynamic range (max - min over all samples).
- **Cosine similarity** per sample row, judged only on rows where the reference carries signal: a row whose RMS is
  well above the precision's resolution at that scale (and, where tensors are FP16, above FP16's smallest normal).
  On a near-zero row (a sigmoid map of about 1e-5 on random inputs) cosine measures rounding noise, not the model.

A value that is not finite in FP32 and the same in the converted model (NaN in both, or the same infinity) is
agreement, left out of both figures: the sqrt of a negative input is NaN in any precision. Not finite in one only
is an error of infinite size. An output where no sample carries signal (NaN everywhere in FP32 included), or whose
reference is the same for every sample (to the mode's resolution at its scale: a net whose output does not respond
to these inputs, a softmax saturated to one class), is *uninformative*: the gate does not judge it and asks for real
inputs (``heldout.npz``). For classifiers top-1 agreement and for embedding models recall@k of FP32's nearest
neighbours are judged as well.
"""

from __future__ import annotations

import numpy as np
import onnx

from trtfarm.precision.output_record import OutputFigures
from trtfarm.precision.recipe import Recipe

FP16_TINY = 6.103515625e-05  # smallest normal FP16 value
# Relative resolution of each mode at an output's scale (FP16: 10-bit mantissa; INT8: a 127-step grid; ...)
RESOLUTION = {"fp32": 2.0**-23, "fp16": 2.0**-10, "bf16": 2.0**-7, "int8": 2.0**-7, "fp8": 2.0**-4}
SIGNAL = 4.0  # a row carries signal when its RMS is this many resolutions above zero
RANGE_OF_OP = {"Sigmoid": (0.0, 1.0), "HardSigmoid": (0.0, 1.0), "Softmax": (0.0, 1.0), "Tanh": (-1.0, 1.0)}
# ops that move or pick values without changing their range
PASS_THROUGH = {"Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Resize", "Slice",
                "Gather", "Concat", "Expand", "Tile", "MaxPool", "Split", "DepthToSpace", "SpaceToDepth"}


def output_ranges(model: onnx.ModelProto) -> dict[str, tuple[tuple[float, float], str]]:
    """Output name -> (range, the op it comes from) for outputs whose last value-changing op bounds them."""
    producer = {t: n for n in model.graph.node for t in n.output}

    def bound(tensor: str, depth: int = 0) -> tuple[tuple[float, float], str] | None:
        node = producer.get(tensor)
        if node is None or depth > 16:
            return None
        if node.op_type in RANGE_OF_OP:
            return RANGE_OF_OP[node.op_type], node.op_type
        if node.op_type not in PASS_THROUGH:
            return None
        data = [node.input[0]] if node.op_type != "Concat" else list(node.input)
        found = [bound(t, depth + 1) for t in data if t]
        if not found or any(f is None for f in found):
            return None
        return (min(f[0][0] for f in found), max(f[0][1] for f in found)), found[0][1]

    return {o.name: r for o in model.graph.output if (r := bound(o.name)) is not None}


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1).astype(np.float64) if x.ndim else x.reshape(1, 1).astype(np.float64)


def _scale(a: np.ndarray, declared: tuple[float, float] | None, source: str) -> tuple[float, str]:
    if declared is not None:
        return float(declared[1] - declared[0]), source or "declared"
    finite = a[np.isfinite(a)]
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    if span > 0:
        return span, "reference range"
    peak = float(np.abs(finite).max()) if finite.size else 0.0
    return (peak, "reference magnitude") if peak > 0 else (1.0, "unit (constant zero reference)")


def agreeing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where both hold the same value that is not finite: NaN in both, or the same infinity."""
    return (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row; a row where either holds a value that is not finite (agreement left out before) is 0."""
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    a, b = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(b), b, 0.0)
    denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(finite & (denom > 0), (a * b).sum(axis=1) / np.maximum(denom, 1e-300), 0.0)


def sample_spread(ref: np.ndarray, axis: int = 0, samples: int | None = None) -> float | None:
    """The widest range one value of ``ref`` takes across its samples (along ``axis``).

    None when that cannot be told: one sample, an output that does not hold ``samples`` along ``axis`` (one value
    given with every batch), or no value that is finite in every sample.
    """
    if ref.ndim <= axis or ref.shape[axis] < 2 or (samples is not None and ref.shape[axis] != samples):
        return None
    x = np.moveaxis(ref, axis, 0).reshape(ref.shape[axis], -1)
    finite = np.isfinite(x).all(axis=0)
    if not finite.any():
        return None
    x = x[:, finite] if not finite.all() else x
    return float((x.max(axis=0).astype(np.float64) - x.min(axis=0)).max())


def output_figures(name: str, ref: np.ndarray, got: np.ndarray, recipe: Recipe,
                   declared: tuple[float, float] | None = None, source: str = "", *, axis: int = 0,
                   samples: int | None = None) -> OutputFigures:
    """Cosine per sample row, error against the output's scale, max abs/rel error, and the task's figure.

    ``declared`` is the output's range when known (the recipe's ``output_ranges`` win over it). ``axis``: where the
    output's samples run (a recurrent state's batch axis); ``samples``: how many the inputs held, when known.
    """
    a, b = _rows(ref), _rows(got)
    if name in recipe.output_ranges:
        declared, source = tuple(recipe.output_ranges[name]), "declared in the recipe"
    scale, scale_from = _scale(a, declared, source)
    same = agreeing(a, b)
    a, b = np.where(same, 0.0, a), np.where(same, 0.0, b)  # agreement: no error, no part of the cosine
    cos = _cosine(a, b)
    diff = np.where(np.isfinite(a) & np.isfinite(b), np.abs(a - b), np.inf)
    max_abs = float(diff.max(initial=0.0))
    fig = OutputFigures(name, float(cos.mean()), float(cos.min()), max_abs,
                        float((diff / (np.abs(np.nan_to_num(a)) + 1e-6)).max(initial=0.0)), scale=scale,
                        scale_from=scale_from, max_error=max_abs / scale, rows=len(a))
    mode = recipe.mode
    floor = SIGNAL * max(RESOLUTION[mode] * scale, FP16_TINY if mode in ("fp16", "int8", "fp8") else 0.0)
    judged = np.maximum((~same).sum(axis=1), 1)  # a row's values that are not agreement on a non-finite one
    finite = np.where(np.isfinite(a), a, 0.0)
    signal = ((~same).any(axis=1)) & (np.sqrt((finite * finite).sum(axis=1) / judged) >= floor)
    fig.signal_rows = int(signal.sum())
    if signal.any():
        fig.cosine_signal_mean, fig.cosine_signal_min = float(cos[signal].mean()), float(cos[signal].min())
    span = float(np.ptp(a[np.isfinite(a) & ~same])) if (np.isfinite(a) & ~same).any() else 0.0
    fig.sample_spread = spread = sample_spread(ref, axis, samples)
    if spread is not None and signal.any() and spread <= RESOLUTION[mode] * scale:
        fig.same_for_every_sample = True
    if same.all():
        fig.uninformative = ("no sample carries signal: FP32 gives NaN or an infinity in every value (the "
                             "converted model the same), so there is nothing to compare")
    elif not signal.any():
        fig.uninformative = (f"no sample carries signal: FP32 RMS below {floor:.3g} in every row (max |x| "
                             f"{float(np.abs(finite).max()):.3g} against a scale of {scale:.3g})")
    elif fig.same_for_every_sample:
        fig.uninformative = (f"FP32 gives the same output for every one of the {ref.shape[axis]} samples (no value "
                             f"varies by more than {spread:.3g} across them, against a scale of {scale:.3g}): the "
                             "output does not respond to these inputs")
    elif span <= RESOLUTION[mode] * scale:
        fig.uninformative = f"FP32 output hardly varies across samples (range {span:.3g}, scale {scale:.3g})"
    _task_figures(fig, a, b, recipe)
    return fig


def _task_figures(fig: OutputFigures, a: np.ndarray, b: np.ndarray, recipe: Recipe) -> None:
    k = min(recipe.gate_thresholds.k, len(a) - 1)
    if recipe.task == "classifier":
        fig.extra["top1_agreement"] = float((a.argmax(1) == b.argmax(1)).mean())
    elif recipe.task == "embedding" and k >= 1:
        fig.extra[f"recall_at_{k}"] = recall_at_k(a, np.where(np.isfinite(b), b, 0.0), k)


def recall_at_k(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Share of each sample's k nearest FP32 neighbours (cosine) that the converted model also ranks top-k."""
    def neighbours(x):
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        sim = x @ x.T
        np.fill_diagonal(sim, -np.inf)
        return np.argsort(-sim, axis=1)[:, :k]

    na, nb = neighbours(a), neighbours(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(na, nb, strict=True)]))


def figure_failures(figs: list[OutputFigures], recipe: Recipe) -> list[str]:
    """Each figure beyond the recipe's thresholds, as a sentence naming the output."""
    t, out = recipe.gate_thresholds, []
    for f in figs:
        mean, low = (f.cosine_mean, f.cosine_min) if f.signal_rows is None else \
            (f.cosine_signal_mean, f.cosine_signal_min)
        if mean is not None and (mean < t.cosine_mean or low < t.cosine_min):
            rows = "" if f.signal_rows is None else f" over the {f.signal_rows} of {f.rows} samples with signal"
            out.append(f"output {f.output!r}: cosine mean {mean:.6f} / min {low:.6f}{rows} below "
                       f"{t.cosine_mean} / {t.cosine_min}")
        if f.max_error is not None and not f.max_error <= t.max_error:
            out.append(f"output {f.output!r}: max error {f.max_abs:.3g} is {f.max_error:.3g} of its scale "
                       f"{f.scale:.3g} ({f.scale_from}), above {t.max_error}")
        for key, value in f.extra.items():
            need = t.top1_agreement if key == "top1_agreement" else t.recall_at_k
            if value < need:
                out.append(f"output {f.output!r}: {key} {value:.4f} below {need}")
    return out
