"""The layer-wise search: which nodes of a converted model cost the most accuracy, on the samples that drift most.

Only when the gate fails: ``worst_samples`` picks the samples whose outputs drift most from FP32,
``layerwise_divergence`` runs both models on them with every computed tensor marked as an output and charges each
node with the drift it adds. Every tensor of a model passes through here, whatever its rank (0-d shape values and
sums included, empty ones) and dtype (bool and integer tensors as well as floats): the helpers below take any.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from trtfarm.precision.inputs import batch_axes, fixed_batch
from trtfarm.precision.runs import all_tensors

NUMERIC = "biuf"  # the dtype kinds whose values the layer-wise search compares: bool, integers, floats
LAYERWISE_SAMPLES = 4  # the samples the layer-wise search runs: those whose outputs drift most from FP32


def worst_samples(model: onnx.ModelProto, feeds: list[dict], ref: dict[str, np.ndarray], got: dict[str, np.ndarray],
                  axes: dict[str, int], count: int = LAYERWISE_SAMPLES) -> dict:
    """A feed of the ``count`` samples whose outputs drift most from FP32 (in feed order), for the layer-wise search.

    A sample's drift is, over the outputs that hold one row per sample (along ``axes``, else the first axis), the
    largest ``|FP32 - converted|`` of its row against the output's largest FP32 magnitude; a row where the converted
    model gives a value that is not finite and FP32 does not drifts most. Every tensor of both models is held for
    these samples only: the search costs a quarter of one 16-sample feed, and looks where the conversion went
    wrong, not at whichever samples came first. A static export (its batch fixed) gets the feed holding the worst
    sample; a model without batched inputs or per-sample outputs, the first feed.
    """
    in_axes = {n: a for n, a in batch_axes(model).items() if feeds and n in feeds[0]}
    if not in_axes:
        return feeds[0]
    name = next(iter(in_axes))
    rows = [int(np.shape(f[name])[in_axes[name]]) for f in feeds]
    total = sum(rows)
    drift = np.zeros(total)
    found = False
    for out, a in ref.items():
        b, axis = got.get(out), axes.get(out, 0)
        if b is None or a.shape != b.shape or a.ndim <= axis or a.shape[axis] != total or not a.size:
            continue
        found = True
        a2 = np.moveaxis(a, axis, 0).reshape(total, -1)
        b2 = np.moveaxis(b, axis, 0).reshape(total, -1)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, told below
            diff = np.subtract(a2, b2, dtype=np.float64)  # 2-d: an array, taken abs of in place
        np.abs(diff, out=diff)
        diff[~np.isfinite(diff)] = 0.0  # a row that breaks is told below
        per = diff.max(axis=1) / (float(_abs_max(a2)) + 1e-12)
        broke = ~np.isfinite(b2).all(axis=1) & np.isfinite(a2).all(axis=1)
        drift = np.maximum(drift, np.where(broke, np.inf, per))
    if not found or total <= count and len(feeds) == 1:
        return feeds[0]
    starts = np.cumsum([0, *rows])
    if fixed_batch(model):  # its batch cannot change: the whole feed that holds the worst sample
        return feeds[int(np.searchsorted(starts, int(np.argmax(drift)), side="right")) - 1]
    chosen = sorted(int(i) for i in np.argsort(-drift, kind="stable")[:count])
    feed_of = [int(np.searchsorted(starts, i, side="right")) - 1 for i in chosen]
    where = [(f, i - int(starts[f])) for f, i in zip(feed_of, chosen, strict=True)]
    parts = {n: [np.take(feeds[f][n], [r], axis=ax) for f, r in where] for n, ax in in_axes.items()}
    if any(len({p.shape for p in ps}) > 1 for ps in parts.values()):  # feeds of other sizes: not one batch
        return feeds[0]
    return {n: np.concatenate(parts[n], axis=in_axes[n]) if n in parts else v for n, v in feeds[0].items()}


def layerwise_divergence(fp32: Path, converted: Path, feed: dict, limit: int = 5,
                         rel_tol: float = 1e-2) -> list[dict]:
    """The nodes that cost the most accuracy, costliest first: each one's own share of the drift from FP32.

    A node's cost is the relative error of its output less the largest relative error among its inputs (what it
    added, not what it inherited), from one run of each model marking every tensor; a node whose output overflows
    where FP32's does not costs most. Nodes whose output drifts less than ``rel_tol`` are left out.
    """
    model, ref = all_tensors(fp32, feed)
    _, got = all_tensors(converted, feed, keep=False)
    errors: dict[str, float] = {}
    found = []
    for node in model.graph.node:
        for t in node.output:
            if t not in ref or t not in got or ref[t].shape != got[t].shape:
                continue
            a, b = ref[t], got[t]
            if a.dtype.kind not in NUMERIC or b.dtype.kind not in NUMERIC:  # strings, sequences: no error to take
                continue
            if not np.isfinite(b).all() and np.isfinite(a).all():
                errors[t] = np.inf
                cost, issue = np.inf, f"overflow: non-finite values (FP32 max |x| = {_abs_max(a):.4g})"
            else:
                errors[t] = rel = _relative_error(a, b)
                cost = rel - max((errors.get(i, 0.0) for i in node.input), default=0.0)
                issue = f"relative error {rel:.3g}, {max(cost, 0.0):.3g} of it added here"
            if errors[t] > rel_tol and cost > 0:
                found.append({"node": node.name, "op": node.op_type, "tensor": t, "issue": issue,
                              "cost": float(min(cost, 1e308))})
            break
    return sorted(found, key=lambda d: -d["cost"])[:limit]


def _abs_max(a: np.ndarray) -> np.float64:
    """``max |a|`` over ``a``'s finite values, as a float64; 0.0 where there is none (an empty tensor, NaN only).

    Read from ``a``'s smallest and largest value, in its own type and without a copy: exact in any float type, and
    in an integer one, where ``|x|`` of the most negative value does not fit (``abs(int8(-128))`` is -128). Only a
    tensor that holds an infinity or NaN is read again, over its finite values.
    """
    a = np.asarray(a)
    if not a.size:
        return np.float64(0.0)
    low, high = a.min(), a.max()
    if a.dtype.kind == "f" and not (np.isfinite(low) and np.isfinite(high)):
        finite = np.isfinite(a)
        if not finite.any():
            return np.float64(0.0)
        low, high = a.min(where=finite, initial=np.inf), a.max(where=finite, initial=-np.inf)
    if a.dtype.kind in "biu":
        return np.float64(max(abs(int(low)), abs(int(high))))
    return np.float64(max(abs(float(low)), abs(float(high))))


def _relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a - b| / (max |a| + 1e-12)``, the difference taken in float64; 0.0 for empty tensors.

    The subtraction casts each element to float64 as it goes, into one float64 buffer of the tensor's shape (the
    values of ``a.astype(np.float64) - b.astype(np.float64)``, without two float64 copies of every tensor of the
    layer-wise search); the buffer is an array at every rank (NumPy gives a scalar for a 0-d difference, not an
    array to take ``abs`` in place). As the gate's figures take them (``figures.agreeing``), a value that is not
    finite in both and the same (NaN in both, the same infinity) is no error, and one that is not finite in one
    only an error of infinite size; ``max |a|`` is over ``a``'s finite values.
    """
    a, b = np.asarray(a), np.asarray(b)
    diff = np.empty(np.broadcast_shapes(a.shape, b.shape), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, a sum past float64's range inf
        np.subtract(a, b, out=diff, dtype=np.float64)
    np.abs(diff, out=diff)
    worst = diff.max(initial=0.0)
    if not np.isfinite(worst):  # an infinity or NaN in either: judged where the difference is not finite only
        bad = np.isfinite(diff, out=np.empty(diff.shape, dtype=bool))  # an array at rank 0 too
        np.logical_not(bad, out=bad)
        x, y = np.broadcast_to(a, diff.shape)[bad], np.broadcast_to(b, diff.shape)[bad]
        diff[bad] = np.where((np.isnan(x) & np.isnan(y)) | (x == y), 0.0, np.inf)
        worst = diff.max(initial=0.0)
    del diff  # before max |a| (a second pass, over a tensor that holds an infinity or NaN)
    return float(worst / (_abs_max(a) + 1e-12))
