"""The accuracy gate, on CPU, before any engine exists: the converted model against the FP32 model.

Both run through Polygraphy's comparator with onnxruntime, graph optimisations off: the gate judges each node in
the precision the ONNX gives it. (onnxruntime fuses MatMul + Mul and so hides an FP16 overflow of the product that
another runtime may not fuse away; with Q/DQ graphs its fusions give wrong FP8 results.) Figures per output: cosine
similarity of each sample's output (mean, min), max absolute and relative error; for classifiers top-1 agreement,
for embedding models recall@k of FP32's nearest neighbours. When the gate fails, a layer-wise run names the first
nodes where the conversion diverges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from trtfarm.precision.recipe import Recipe

FP16_MAX = 65504.0


@dataclass
class OutputFigures:
    """How one output of the converted model compares with FP32."""

    output: str
    cosine_mean: float
    cosine_min: float
    max_abs: float
    max_rel: float
    extra: dict = field(default_factory=dict)


@dataclass
class GateReport:
    """The gate's verdict. ``passed`` is None when the numerics could not be run here (BF16 on CPU)."""

    mode: str
    passed: bool | None
    thresholds: dict
    figures: list[OutputFigures] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    diverging_nodes: list[dict] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        """Plain JSON for the manifest and ``--json``."""
        return asdict(self)


def _session(path_or_bytes):
    import onnxruntime as ort
    from polygraphy.backend.onnxrt import SessionFromOnnx

    return SessionFromOnnx(str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes,
                           providers=["cpu"], graph_optimization_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def run_models(paths: list, feeds: list[dict], keep_dtype: bool = False) -> list[dict[str, np.ndarray]]:
    """Run each model on every feed through Polygraphy's comparator; outputs concatenated over feeds."""
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.comparator import Comparator
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR
    runners = [OnnxrtRunner(_session(p), name=f"model{i}") for i, p in enumerate(paths)]
    results = Comparator.run(runners, data_loader=feeds)
    outs = []
    for i in range(len(paths)):
        iterations = dict(results)[f"model{i}"]
        outs.append({k: _stack([np.asarray(it[k]) if keep_dtype else np.asarray(it[k], dtype=np.float32)
                                for it in iterations]) for k in iterations[0].keys()})
    return outs


def _stack(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-feed results along the batch axis (scalars and shape tensors: the first feed's)."""
    return np.concatenate(parts) if parts[0].ndim else parts[0]


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1).astype(np.float64)


def output_figures(name: str, ref: np.ndarray, got: np.ndarray, recipe: Recipe) -> OutputFigures:
    """Cosine per sample row, max abs/rel error, and the task's figure (top-1 or recall@k)."""
    a, b = _rows(ref), _rows(got)
    finite = np.isfinite(b).all(axis=1)
    denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.where(finite & (denom > 0), (a * b).sum(axis=1) / np.maximum(denom, 1e-30), 0.0)
    diff = np.abs(a - b)
    fig = OutputFigures(name, float(cos.mean()), float(cos.min()), float(np.nanmax(np.where(np.isfinite(diff), diff,
                                                                                             np.inf))),
                        float(np.nanmax(diff / (np.abs(a) + 1e-6)) if np.isfinite(diff).all() else np.inf))
    k = min(recipe.gate_thresholds.k, len(a) - 1)
    if recipe.task == "classifier":
        fig.extra["top1_agreement"] = float((a.argmax(1) == b.argmax(1)).mean())
    elif recipe.task == "embedding" and k >= 1:
        fig.extra[f"recall_at_{k}"] = _recall_at_k(a, np.where(np.isfinite(b), b, 0.0), k)
    return fig


def _recall_at_k(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Share of each sample's k nearest FP32 neighbours (cosine) that the converted model also ranks top-k."""
    def neighbours(x):
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        sim = x @ x.T
        np.fill_diagonal(sim, -np.inf)
        return np.argsort(-sim, axis=1)[:, :k]

    na, nb = neighbours(a), neighbours(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(na, nb, strict=True)]))


def figure_failures(figs: list[OutputFigures], recipe: Recipe) -> list[str]:
    """Each figure below the recipe's thresholds, as a sentence naming the output."""
    t, out = recipe.gate_thresholds, []
    for f in figs:
        if f.cosine_mean < t.cosine_mean or f.cosine_min < t.cosine_min:
            out.append(f"output {f.output!r}: cosine mean {f.cosine_mean:.6f} / min {f.cosine_min:.6f} below "
                       f"{t.cosine_mean} / {t.cosine_min}")
        for key, value in f.extra.items():
            need = t.top1_agreement if key == "top1_agreement" else t.recall_at_k
            if value < need:
                out.append(f"output {f.output!r}: {key} {value:.4f} below {need}")
    return out


def accuracy_gate(fp32: Path, converted: Path, feeds: list[dict], recipe: Recipe) -> GateReport:
    """Compare ``converted`` with ``fp32`` on ``feeds`` and judge against the recipe's thresholds."""
    thresholds = recipe.gate_thresholds.model_dump()
    if recipe.mode == "fp32":
        return GateReport("fp32", True, thresholds, note="fp32 recipe: the model is used as exported")
    if recipe.mode == "bf16":
        onnx.checker.check_model(str(converted))
        n = sum(1 for t in onnx.load(str(converted)).graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16)
        return GateReport("bf16", None, thresholds, note=f"BF16 numerics not verified here: onnxruntime has no BF16 "
                          f"kernels on CPU. Checked: onnx.checker passes; {n} BF16 initializers. The engine check on "
                          "the target GPU is the first numeric comparison.")
    ref, got = run_models([fp32, converted], feeds)
    figs = [output_figures(name, ref[name], got[name], recipe) for name in ref]
    overflows = fp16_overflows(converted, feeds)
    failures = figure_failures(figs, recipe) + [f"{o['tensor']} (output of {o['node']}, {o['op']}): {o['issue']}"
                                           for o in overflows]
    report = GateReport(recipe.mode, not failures, thresholds, figs, failures)
    if failures:
        report.diverging_nodes = (overflows + [d for d in layerwise_divergence(fp32, converted, feeds[0])
                                               if d["node"] not in {o["node"] for o in overflows}])[:5]
    return report


def fp16_overflows(converted: Path, feeds: list[dict], limit: int = 5) -> list[dict]:
    """FP16 tensors of the converted graph that hold inf/NaN on the held-out data.

    onnxruntime's CPU kernels upcast FP16 chains internally, so an overflow between two nodes does not reach the
    outputs there; under strong typing TensorRT stores every FP16 tensor in FP16, so it would. Each tensor is
    materialised (marked as an output) to see what an FP16 store holds.
    """
    model, values = all_tensors(converted, {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    producer = {t: n for n in model.graph.node for t in n.output}
    found = []
    for node in model.graph.node:
        for t in node.output:
            v = values.get(t)
            if v is not None and v.dtype == np.float16 and not np.isfinite(v).all():
                found.append({"node": producer[t].name, "op": producer[t].op_type, "tensor": t,
                              "issue": f"FP16 overflow: {int((~np.isfinite(v)).sum())} non-finite values"})
        if len(found) >= limit:
            break
    return found


def all_tensors(path: Path, feed: dict) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Run a model with every intermediate tensor marked as an output (Polygraphy's MARK_ALL)."""
    from polygraphy import constants
    from polygraphy.backend.onnx import BytesFromOnnx, ModifyOutputs, OnnxFromPath

    model = OnnxFromPath(str(path))()
    marked = ModifyOutputs(model, outputs=constants.MARK_ALL, copy=True)()
    results = run_models([BytesFromOnnx(marked)()], [feed], keep_dtype=True)[0]
    return model, results


def layerwise_divergence(fp32: Path, converted: Path, feed: dict, limit: int = 5,
                         rel_tol: float = 1e-2) -> list[dict]:
    """The first nodes (graph order) whose outputs overflow or drift from FP32 beyond ``rel_tol``."""
    model, ref = all_tensors(fp32, feed)
    _, got = all_tensors(converted, feed)
    found = []
    for node in model.graph.node:
        for t in node.output:
            if t not in ref or t not in got or ref[t].shape != got[t].shape:
                continue
            a, b = ref[t].astype(np.float64), got[t].astype(np.float64)
            if not np.isfinite(b).all() and np.isfinite(a).all():
                issue = f"overflow: non-finite values (FP32 max |x| = {np.abs(a).max():.4g})"
            else:
                rel = float(np.abs(a - b).max() / (np.abs(a).max() + 1e-12))
                if rel <= rel_tol:
                    continue
                issue = f"relative error {rel:.3g}"
            found.append({"node": node.name, "op": node.op_type, "tensor": t, "issue": issue})
            break
        if len(found) >= limit:
            break
    return found
