"""How one output of a converted model (or an engine) compares with FP32, and what the gate accepts.

Each output is judged in its task's terms, by its ``kind`` (``Thresholds.kind`` in farm.yaml, else read from the
graph and the recipe's task: ``output_meaning.py``):

- **probability** (a Sigmoid output: a detector's or segmenter's map): the share of values whose decision changes at
  the thresholds users decide at (``decision_at``, else 0.5 and the comparisons the graph itself makes on the
  output), and the error at a high quantile (``error_quantile``, as Polygraphy's ``--check-error-stat quantile``).
  One pixel of a million that moves by 0.09 across no threshold is not a broken conversion.
- **classes** (a Softmax output, or a classifier's logits): top-1 agreement along the class axis, and the quantile
  error.
- **embedding**: cosine over the samples with signal, and recall@k of FP32's nearest neighbours.
- **values** (anything else: regression, hidden states, boxes): cosine, and the error at the quantile.

The largest single error is always reported, and fails any output where one model gives a value that is not finite
and the other does not. The figures:

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
inputs (``heldout.npz``).
"""

from __future__ import annotations

import numpy as np

from trtfarm.errors import UserInputError
from trtfarm.precision.output_meaning import OutputMeaning, output_kind
from trtfarm.precision.output_record import OutputFigures
from trtfarm.precision.recipe import Recipe, Thresholds

FP16_TINY = 6.103515625e-05  # smallest normal FP16 value
# Relative resolution of each mode at an output's scale (FP16: 10-bit mantissa; INT8: a 127-step grid; ...)
RESOLUTION = {"fp32": 2.0**-23, "fp16": 2.0**-10, "bf16": 2.0**-7, "int8": 2.0**-7, "fp8": 2.0**-4}
SIGNAL = 4.0  # a row carries signal when its RMS is this many resolutions above zero


def check_output_names(recipe: Recipe, outputs: list[str]) -> None:
    """Refuse thresholds set for an output the model does not have (a typo would judge nothing)."""
    unknown = sorted(set(recipe.gate_thresholds.outputs) - set(outputs))
    if unknown:
        raise UserInputError(f"thresholds.outputs in the recipe names {', '.join(map(repr, unknown))}, not an "
                             f"output of the model; its outputs: {', '.join(outputs)}")


def _rows(x: np.ndarray) -> np.ndarray:
    """One row per sample (the first axis), as float64; a scalar is one row of one value, no rows stay none."""
    if not x.ndim:
        return x.reshape(1, 1).astype(np.float64)
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))).astype(np.float64)


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
                   samples: int | None = None, meaning: OutputMeaning | None = None) -> OutputFigures:
    """Cosine per sample row, error against the output's scale, max abs/rel error, and the task's figure.

    ``declared`` is the output's range when known (the recipe's ``output_ranges`` win over it). ``axis``: where the
    output's samples run (a recurrent state's batch axis); ``samples``: how many the inputs held, when known.
    ``meaning``: what the graph says the output is (``output_meanings``), for its kind and thresholds.
    """
    a, b = _rows(ref), _rows(got)
    if name in recipe.output_ranges:
        declared, source = tuple(recipe.output_ranges[name]), "declared in the recipe"
    scale, scale_from = _scale(a, declared, source)
    if not a.size:  # a detector's boxes when it finds nothing: no value to compare
        return OutputFigures(name, 1.0, 1.0, 0.0, 0.0, scale=scale, scale_from=scale_from, max_error=0.0,
                             rows=len(a), signal_rows=0, kind=output_kind(name, recipe, meaning),
                             uninformative=f"the output is empty on these inputs (shape {list(np.shape(ref))}), so "
                                           "there is nothing to compare")
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
    # a class map's row carries signal where a class stands out (its largest value): a softmax over thousands of
    # classes has a tiny RMS though it decides; elsewhere the row's RMS
    classes = output_kind(name, recipe, meaning) == "classes"
    level = np.abs(finite).max(axis=1, initial=0.0) if classes else np.sqrt((finite * finite).sum(axis=1) / judged)
    signal = ((~same).any(axis=1)) & (level >= floor)
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
        fig.uninformative = (f"no sample carries signal: FP32 {'largest value' if classes else 'RMS'} below "
                             f"{floor:.3g} in every row (max |x| "
                             f"{float(np.abs(finite).max()):.3g} against a scale of {scale:.3g})")
    elif fig.same_for_every_sample:
        fig.uninformative = (f"FP32 gives the same output for every one of the {ref.shape[axis]} samples (no value "
                             f"varies by more than {spread:.3g} across them, against a scale of {scale:.3g}): the "
                             "output does not respond to these inputs")
    elif span <= RESOLUTION[mode] * scale:
        fig.uninformative = f"FP32 output hardly varies across samples (range {span:.3g}, scale {scale:.3g})"
    _task_figures(fig, ref, got, a, b, same, recipe, meaning)
    return fig


def _task_figures(fig: OutputFigures, ref: np.ndarray, got: np.ndarray, a: np.ndarray, b: np.ndarray,
                  same: np.ndarray, recipe: Recipe, meaning: OutputMeaning | None) -> None:
    """The figures of the output's kind: decision flips, top-1, recall@k, the error at the quantile."""
    t = recipe.gate_thresholds.for_output(fig.output)
    fig.kind = kind = output_kind(fig.output, recipe, meaning)
    both = np.isfinite(a) & np.isfinite(b) & ~same
    if both.any():
        err = np.abs(a[both] - b[both])
        fig.error_quantile = t.error_quantile
        fig.quantile_error = float(np.quantile(err, t.error_quantile, method="higher")) / fig.scale
    if kind == "probability":
        cuts = t.decision_at or sorted({0.5, *(meaning.cuts if meaning else ())})
        for cut in cuts:
            flipped = (a[both] > cut) != (b[both] > cut)
            fig.flips[f"{cut:g}"] = float(flipped.sum() / max(a.size, 1))
        fig.decided_by = [f"decisions at {', '.join(fig.flips)}", f"error at q{t.error_quantile:g}"]
        if both.any() and all(len(np.unique(a[both] > cut)) == 1 for cut in cuts):
            _one_decision(fig, f"every FP32 value lies on one side of {', '.join(fig.flips)}")
    elif kind == "classes":
        class_axis = meaning.axis if meaning and meaning.axis is not None and recipe.task != "classifier" else -1
        found = top1_agreement(np.asarray(ref), np.asarray(got), class_axis)
        if found is not None:
            fig.extra["top1_agreement"], picked = found
            if len(picked) == 1:
                _one_decision(fig, f"FP32 picks class {picked[0]} at every position")
        fig.decided_by = ["top1_agreement", f"error at q{t.error_quantile:g}"]
    elif kind == "embedding":
        k = min(t.k, len(a) - 1)
        if k >= 1:
            fig.extra[f"recall_at_{k}"] = recall_at_k(a, np.where(np.isfinite(b), b, 0.0), k)
        fig.decided_by = ["cosine"] + ([f"recall_at_{k}"] if k >= 1 else [])
    else:
        fig.decided_by = ["cosine", f"error at q{t.error_quantile:g}"]


def top1_agreement(ref: np.ndarray, got: np.ndarray, axis: int) -> tuple[float, list[int]] | None:
    """Share of positions whose arg-max along ``axis`` (the classes) is the same, and the classes FP32 picks.

    A tie in FP32 agrees with either class. None when the output has no such axis (a scalar) or one class.
    """
    if ref.ndim == 0 or ref.shape != got.shape or ref.shape[axis] < 2 or not ref.size:
        return None
    r = np.nan_to_num(np.moveaxis(ref, axis, -1).astype(np.float64), nan=-np.inf)
    g = np.nan_to_num(np.moveaxis(got, axis, -1).astype(np.float64), nan=-np.inf)
    pick = np.take_along_axis(r, g.argmax(-1)[..., None], -1)[..., 0]
    return float((pick >= r.max(-1)).mean()), [int(c) for c in np.unique(r.argmax(-1))[:2]]


def _one_decision(fig: OutputFigures, why: str) -> None:
    """FP32 makes one decision everywhere on these inputs: the figures cannot show a decision that changes."""
    if not fig.uninformative:
        fig.uninformative = (f"{why} on these inputs, so no decision can change; the decision figures say "
                             "nothing of the conversion there")
        fig.signal_rows = 0


def recall_at_k(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Share of each sample's k nearest FP32 neighbours (cosine) that the converted model also ranks top-k."""
    def neighbours(x):
        with np.errstate(invalid="ignore", over="ignore"):  # a row holding an infinity: NaN, ranked last
            x = np.nan_to_num(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12), nan=0.0)
        sim = x @ x.T
        np.fill_diagonal(sim, -np.inf)
        return np.argsort(-sim, axis=1)[:, :k]

    na, nb = neighbours(a), neighbours(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(na, nb, strict=True)]))


def figure_failures(figs: list[OutputFigures], recipe: Recipe) -> list[str]:
    """Each figure of an output's kind beyond its thresholds, as a sentence naming the output and the figure."""
    out = []
    for f in figs:
        t = recipe.gate_thresholds.for_output(f.output)
        if f.max_abs == np.inf or f.max_error == np.inf:
            out.append(f"output {f.output!r}: max error inf: the converted model gives a value that is not finite "
                       "where FP32's is (or a number where FP32 gives NaN or an infinity)")
            continue
        out += _kind_failures(f, t) if f.kind else _stored_failures(f, t)
    return out


def _cosine_failure(f: OutputFigures, t: Thresholds) -> list[str]:
    mean, low = (f.cosine_mean, f.cosine_min) if f.signal_rows is None else (f.cosine_signal_mean, f.cosine_signal_min)
    if mean is None or (mean >= t.cosine_mean and low >= t.cosine_min):
        return []
    rows = "" if f.signal_rows is None else f" over the {f.signal_rows} of {f.rows} samples with signal"
    return [f"output {f.output!r}: cosine mean {mean:.6f} / min {low:.6f}{rows} below {t.cosine_mean} / {t.cosine_min}"]


def _kind_failures(f: OutputFigures, t: Thresholds) -> list[str]:
    out = _cosine_failure(f, t) if f.kind in ("values", "embedding") else []
    if f.kind != "embedding" and f.quantile_error is not None and not f.quantile_error <= t.max_error:
        out.append(f"output {f.output!r} ({f.kind}): error {f.quantile_error:.3g} of its scale {f.scale:.3g} "
                   f"({f.scale_from}) at the {_percentile(f.error_quantile)} of its values, above {t.max_error} "
                   f"(largest single error {f.max_abs:.3g})")
    for cut, share in f.flips.items():
        if share > t.flip_share:
            out.append(f"output {f.output!r} (probability): the decision at {cut} changes on {share:.3%} of its "
                       f"values, above {t.flip_share:.3%}")
    return out + _extra_failures(f, t)


def _stored_failures(f: OutputFigures, t: Thresholds) -> list[str]:
    """A report stored before outputs had kinds: judged as it was (cosine, the largest error, the extras)."""
    out = _cosine_failure(f, t)
    if f.max_error is not None and not f.max_error <= t.max_error:
        out.append(f"output {f.output!r}: max error {f.max_abs:.3g} is {f.max_error:.3g} of its scale "
                   f"{f.scale:.3g} ({f.scale_from}), above {t.max_error}")
    return out + _extra_failures(f, t)


def _extra_failures(f: OutputFigures, t: Thresholds) -> list[str]:
    """Top-1 agreement and recall@k below their thresholds."""
    out = []
    for key, value in f.extra.items():
        need = t.top1_agreement if key == "top1_agreement" else t.recall_at_k
        if value < need:
            out.append(f"output {f.output!r}: {key} {value:.4f} below {need}")
    return out


def _percentile(q: float | None) -> str:
    return "largest" if q in (None, 1.0) else f"{q * 100:g}th percentile"
