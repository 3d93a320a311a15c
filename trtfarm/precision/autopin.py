"""``--auto-pin``: the smallest set of nodes to keep in FP32 so that an FP16/BF16 conversion passes the gate.

Start from the naive conversion (every node converted). Candidates, in graph order: nodes whose FP32 inputs or
outputs exceed the low-precision range on the held-out data, then the nodes the layer-wise report names. Pin
candidates one at a time until the gate passes, then try removing each pin again: what is left is needed. The FP32
model's session, outputs and all-tensor run are computed once and shared by every attempt; only the first attempt
runs the layer-wise search. A pin is reported only when it changed the model: one whose removal converts to the
same bytes (the node stays FP32 for another reason) is dropped, and the report gives each FP32 node its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from trtfarm.onnxfile import load_model
from trtfarm.precision.convert import QUANTIZE, Converted, convert_onnx
from trtfarm.precision.gate import FP16_MAX, GateReport, accuracy_gate, all_tensors
from trtfarm.precision.progress import Progress
from trtfarm.precision.recipe import GateFailed, Recipe

MAX_TRIES = 32


class AutoPinFailed(GateFailed):
    """``--auto-pin`` found no FP32 node set that passes: a failed gate (exit 1), naming the set it tried."""

    exit_code = 1


@dataclass
class Pinned:
    """The outcome of the search."""

    converted: Converted
    report: GateReport
    pinned: list[str]
    conversions: int
    notes: list[str] = field(default_factory=list)


def overflow_candidates(fp32: Path, feed: dict, limit: float = FP16_MAX) -> list[str]:
    """Nodes (graph order) that read or write values beyond ``limit`` in the FP32 run."""
    model, values = all_tensors(fp32, feed)
    big = {t for t, v in values.items()  # NaN left out (it hides no overflow), an empty tensor holds none
           if np.issubdtype(v.dtype, np.floating) and np.fmax.reduce(np.abs(v).ravel(), initial=0.0) > limit}
    return [n.name for n in model.graph.node if big & (set(n.input) | set(n.output))]


def _exact(names: list[str]) -> list[str]:
    return [f"^{re.escape(n)}$" for n in names]


def _no_passing_set(recipe: Recipe, pins: list[str], tries: int, report: GateReport,
                    ops: list[str] | None = None) -> str:
    """The failed search in one line: the set it tried last, the gate's figures on it, and what to do instead.

    ``ops``: the op types of the pinned nodes; the fix keeps every node of those types in FP32 (options of the
    command that failed), or uses fp32.
    """
    kept = ", ".join(pins) or "none: no node overflows and the layer-wise search named none"
    figures = "; ".join(report.failures)
    if recipe.mode in QUANTIZE:
        return (f"--auto-pin: {recipe.mode} is not for this model: in {tries} conversion(s), the last with the "
                f"{len(pins)} layer(s) that cost the most accuracy kept in FP32 ({kept}), the gate still fails: "
                f"{figures}. Fix: use fp16 (--mode fp16), or fp32")
    return (f"--auto-pin: no FP32 node set passes the {recipe.mode} gate: in {tries} conversion(s), the last with "
            f"{len(pins)} node(s) kept in FP32 ({kept}), the gate still fails: {figures}. Fix: "
            + (f"keep every node of their op types in FP32 ({' '.join(f'--keep-fp32-op {o}' for o in ops)}), or "
               if ops else "") + "use fp32 (--mode fp32)")


def auto_pin(src: Path, recipe: Recipe, work: Path, feeds: list[dict], progress: Progress | None = None, *,
             calibration: list[dict] | None = None) -> Pinned:
    """Search the minimal FP32 node set (on top of the recipe's own keep lists).

    ``feeds`` are the gate's (and AutoCast's reference run's); int8/fp8 quantize on ``calibration``, and their
    candidates are the layers the gate names as costing the most accuracy, costliest first.
    """
    quantized = recipe.mode in QUANTIZE
    naive = recipe.model_copy(update={"data_max": float("inf"), "auto_pin": False})
    progress = progress or Progress()
    tries = 0

    gated: dict[str, GateReport] = {}  # converted digest -> its verdict: the same bytes are gated once

    def attempt(pins: list[str]) -> tuple[Converted, GateReport]:
        nonlocal tries
        tries += 1
        r = naive.model_copy(update={"keep_fp32": [*recipe.keep_fp32, *_exact(pins)]})
        label = f"auto-pin {tries}: {len(pins)} node(s) in FP32"
        with progress.stage(f"{label}, converting"):
            conv = convert_onnx(src, r, work / f"try-{tries}.onnx", feeds=calibration if quantized else feeds)
        if conv.digest not in gated:
            with progress.stage(f"{label}, comparing", 2 * len(feeds)) as step:
                gated[conv.digest] = accuracy_gate(src, conv.path, feeds, r, diagnose=tries == 1, step=step)
        return conv, gated[conv.digest]

    conv, report = attempt([])
    if report.passed is not False:
        return Pinned(conv, report, [], tries, [f"auto-pin: the naive conversion (every node in {recipe.mode}) "
                                                f"is not refused ({report.verdict}); nothing pinned"])
    limit = FP16_MAX if recipe.mode == "fp16" else float(np.finfo(np.float32).max) / 2
    candidates = list(dict.fromkeys(([] if quantized else overflow_candidates(src, feeds[0], limit))
                                    + [d["node"] for d in report.diverging_nodes]))
    pins: list[str] = []
    for name in candidates:
        if tries >= MAX_TRIES:
            break
        pins.append(name)
        conv, report = attempt(pins)
        if report.passed is not False:  # passed, or not judged (then every attempt is: the FP32 outputs decide)
            break
    if report.passed is False:
        op_of = {n.name: n.op_type for n in load_model(src).graph.node}
        ops = sorted({op_of[p] for p in pins if p in op_of} - set(recipe.keep_fp32_ops))
        raise AutoPinFailed(_no_passing_set(recipe, pins, tries, report, ops))
    best = (conv, report)
    for name in list(pins):  # minimality: drop every pin the gate does not need, or that changes nothing
        trial = [p for p in pins if p != name]
        if tries < MAX_TRIES and (found := attempt(trial))[1].passed is not False:
            pins, best = trial, found
    conv = best[0]
    default = convert_onnx(src, recipe.model_copy(update={"auto_pin": False}), work / "default.onnx",
                           feeds=calibration if quantized else feeds)
    if default.digest == conv.digest:  # the pins changed nothing AutoCast's own rules would not have done
        return Pinned(default, best[1], [], tries + 1, [
            f"auto-pin: the smallest FP32 set it found is the one AutoCast's default rules keep (data_max "
            f"{recipe.data_max:g}); nothing pinned"])
    reasons = dict(conv.nodes.fp32_nodes)
    reasons.update({n: "auto-pin: the gate fails without it" for n in pins if n in reasons})
    nodes = replace(conv.nodes, fp32_nodes=reasons)
    notes = [f"auto-pin searched from the naive conversion (every node in {recipe.mode}) in {tries} conversion(s)"]
    if quantized:  # ModelOpt runs what it does not quantize in FP16; the pins are put back in FP32 (pin32)
        notes.append(f"auto-pin kept {', '.join(pins)} out of {recipe.mode} quantization, in FP32; the other layers "
                     "ModelOpt does not quantize run in FP16")
    return Pinned(replace(conv, nodes=nodes), best[1], pins, tries, notes)
