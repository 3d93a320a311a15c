"""The accuracy gate, on CPU, before any engine exists: the converted model against the FP32 model.

Both run in onnxruntime with graph optimisations off, one session per model reused across samples, modes and
auto-pin attempts (``runs``). Per output the gate measures error against the output's scale and cosine similarity
where the reference carries signal (``figures``). The converted model's FP16 tensors are watched in the same run:
under strong typing TensorRT stores every FP16 tensor in FP16, so an overflow between two nodes that onnxruntime's
CPU kernels upcast away would reach a TensorRT engine's outputs. Only when the gate fails does a layer-wise run
name the nodes that cost the most accuracy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import onnx

from trtfarm.onnxfile import load_model
from trtfarm.precision.figures import (
    OutputFigures,
    check_output_names,
    figure_failures,
    output_figures,
)
from trtfarm.precision.inputs import batch_axes
from trtfarm.precision.layerwise import LAYERWISE_SAMPLES, layerwise_divergence, worst_samples
from trtfarm.precision.normalise import name_nodes
from trtfarm.precision.output_meaning import output_meanings, output_ranges
from trtfarm.precision.recipe import Recipe
from trtfarm.precision.runs import (
    all_tensors,
    batch_axes_of,
    infer,
    joined,
    low_precision_tensors,
    reference,
    run_models,
)

__all__ = ["FP16_MAX", "LAYERWISE_SAMPLES", "GateReport", "Verdict", "OutputFigures", "accuracy_gate", "all_tensors",
           "figure_failures", "fp16_overflows", "layerwise_divergence", "output_figures", "run_models", "worst_samples"]

FP16_MAX = 65504.0
HELDOUT_ADVICE = ("pass real inputs as held-out data (heldout.npz: numpy.savez keyed by input name; `--heldout` or "
                  "heldout.npz beside the export) so the gate sees the outputs the model gives in use")


# passed, failed; "not judged": the figures are within limits, but on an output where no sample carries signal, so
# they say nothing of it; "not verified": the numerics could not be run here (BF16 on CPU)
Verdict = Literal["passed", "failed", "not judged", "not verified"]


@dataclass
class GateReport:
    """The gate's verdict. ``passed`` is None when there is none: ``verdict`` says why (not judged, not verified).

    ``warnings`` say where the verdict rests on little evidence (outputs the inputs made degenerate). A report
    whose figures pass on an output where no sample carries signal, or whose FP32 output is the same for every
    sample, is ``not judged`` (also one stored before this verdict existed, as ``passed``): ``note`` names the
    outputs and asks for held-out data.
    """

    mode: str
    passed: bool | None
    thresholds: dict
    figures: list[OutputFigures] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    diverging_nodes: list[dict] = field(default_factory=list)
    note: str = ""
    warnings: list[str] = field(default_factory=list)
    verdict: Verdict | Literal[""] = ""

    def __post_init__(self) -> None:
        blind = [f for f in self.figures if f.signal_rows == 0 or f.same_for_every_sample]
        if self.passed and blind:
            self.passed, self.verdict, self.note = None, "not judged", _not_judged(self.mode, blind)
        if not self.verdict:
            self.verdict = {True: "passed", False: "failed", None: "not verified"}[self.passed]

    def to_json(self) -> dict:
        """Plain JSON for the manifest and ``--json``."""
        return asdict(self)


def _not_judged(mode: str, blind: list[OutputFigures]) -> str:
    names = ", ".join(repr(f.output) for f in blind)
    if all(f.same_for_every_sample for f in blind):
        return (f"{mode} gate not judged: the FP32 model gives the same output for every sample of the gate's inputs "
                f"on output(s) {names} (no value varies by more than {blind[0].sample_spread:.3g} across the "
                f"samples, against a scale of {blind[0].scale:.3g}): the output does not respond to these inputs, "
                "so the figures there say nothing of the conversion; the recipe stays undecided. "
                f"Fix: {HELDOUT_ADVICE}")
    return (f"{mode} gate not judged: no sample of the gate's inputs carries signal on output(s) {names} "
            f"({blind[0].uninformative or 'every row is below the signal floor'}), so the figures there say nothing "
            f"of the conversion; the recipe stays undecided. Fix: {HELDOUT_ADVICE}")


def sample_count(model: onnx.ModelProto, feeds: list[dict]) -> int:
    """The samples ``feeds`` hold: the rows of a batched input over every feed (1 when no input is batched)."""
    axes = batch_axes(model)
    name = next((n for n in axes if feeds and n in feeds[0]), None)
    return sum(int(np.shape(f[name])[axes[name]]) for f in feeds) if name else 1


def overflow_counts(v: np.ndarray) -> tuple[int, int]:
    """(NaN and +inf, -inf) counts of one tensor; an FP16 tensor's are read from its bits (all exponent bits set).

    One integer pass over an FP16 tensor where every value is finite (the usual case), against NumPy's float16
    ``isfinite``, which converts each value.
    """
    v = np.asarray(v)
    if v.dtype.kind != "f":  # an integer or bool tensor holds no inf or NaN (nor does one of strings)
        return 0, 0
    if v.dtype == np.float16:
        bits = np.ascontiguousarray(v).view(np.uint16)
        magnitude = bits & 0x7FFF
        if not magnitude.size or magnitude.max() < 0x7C00:
            return 0, 0
        bad, negative = int(np.count_nonzero(magnitude >= 0x7C00)), int(np.count_nonzero(bits == 0xFC00))
        return bad - negative, negative
    finite = np.isfinite(v)
    bad = 0 if finite.all() else int(finite.size - np.count_nonzero(finite))  # one pass when all finite
    negative = int(np.isneginf(v).sum()) if bad else 0
    return bad - negative, negative


def _not_finite(values: dict[str, np.ndarray], outputs: set[str], watched: set[str] | None) -> dict[str, np.ndarray]:
    """Reduce one feed's outputs: the graph's outputs stay, FP16 tensors become counts of inf/NaN values.

    ``watched`` names the FP16 tensors (``None``: every tensor whose runtime dtype is FP16); other marked tensors
    are dropped.
    """
    out = {}
    for name, v in values.items():
        if name in outputs:
            out[name] = v
        elif (name in watched) if watched is not None else v.dtype == np.float16:
            nonfinite, negative = overflow_counts(v)
            out[f"nonfinite:{name}"] = np.array(nonfinite)
            out[f"neginf:{name}"] = np.array(negative)
    return out


def converted_outputs(converted: Path, feeds: list[dict], outputs: list[str], step: Callable[[], None] | None = None,
                      model: onnx.ModelProto | None = None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The converted model's outputs on ``feeds`` and, per FP16 tensor, how many values overflowed.

    Counts are keyed ``nonfinite:<tensor>`` (NaN and +inf) and ``neginf:<tensor>`` (-inf). One run per feed: the
    FP16 tensors are marked as extra outputs and reduced to counts as each feed finishes, so memory holds one
    feed's activations, not all of them. ``model``: the converted model, when the caller has read it already.
    """
    watched = low_precision_tensors(converted, model)
    names = set(watched) if isinstance(watched, tuple) else None
    results = infer(converted, feeds, extra=watched, each=lambda v: _not_finite(v, set(outputs), names), step=step,
                    keep=False)
    outs = joined([{k: r[k] for k in outputs} for r in results], axes=batch_axes_of(converted, model))
    counts = {k: sum(int(r[k]) for r in results) for k in results[0] if k not in outputs}
    return outs, counts


def _saturations(model: onnx.ModelProto, counts: dict[str, int], overflowed: set[str]) -> list[str]:
    """Warnings for FP16 tensors that hold -inf and nothing else non-finite.

    An additive attention mask adds the most negative float (transformers writes ``finfo.min``) before a softmax:
    in FP16 that saturates to -inf, and the softmax gives the same zeros. Where the outputs pass, it is not an
    overflow; a -inf that does harm shows as NaN or inf further on, or in the outputs' figures.
    """
    producer = {t: n for n in model.graph.node for t in n.output}
    found = [t for k, n in counts.items() if n and k.startswith("neginf:") and (t := k.split(":", 1)[1]) not in
             overflowed and t in producer]
    if not found:
        return []
    first = producer[found[0]]
    return [f"{len(found)} FP16 tensor(s) saturate to -inf (first: {found[0]}, output of {first.name}, "
            f"{first.op_type}), as an additive mask's large negative value does; the outputs are within limits"]


def _beyond_fp32(fp32: Path, source: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict],
                 nonfinite: dict[str, int]) -> dict[str, int]:
    """``nonfinite`` less the FP16 tensors where the FP32 model holds as many NaN and +inf values itself.

    The sqrt of a negative input is NaN in any precision: that is no overflow. An FP16 tensor is matched with the
    FP32 tensor of the same node (by name, unnamed ones as the conversion names them) and output position; the
    FP32 model runs again for these only, and only where some FP16 tensor holds a value that is not finite.
    """
    producer = {t: (n.name, i) for n in converted.graph.node for i, t in enumerate(n.output)}
    nodes = {n.name: n for n in source.graph.node}
    same = {t: nodes[producer[t][0]].output[producer[t][1]] for t, n in nonfinite.items()
            if n and t in producer and producer[t][0] in nodes and len(nodes[producer[t][0]].output) > producer[t][1]}
    if not same:
        return nonfinite
    wanted = tuple(dict.fromkeys(same.values()))
    runs = infer(fp32, feeds, extra=wanted, keep=False,
                 each=lambda v: {k: np.array(overflow_counts(v[k])[0]) for k in wanted if k in v})
    fp32_counts = {k: sum(int(r[k]) for r in runs if k in r) for k in wanted}
    return {t: n for t, n in nonfinite.items() if t not in same or n > fp32_counts[same[t]]}


def _overflow_list(model: onnx.ModelProto, counts: dict[str, int], limit: int = 5) -> list[dict]:
    producer = {t: n for n in model.graph.node for t in n.output}
    found = [{"node": producer[t].name, "op": producer[t].op_type, "tensor": t,
              "issue": f"FP16 overflow: {counts[t]} non-finite values"}
             for n in model.graph.node for t in n.output if counts.get(t)]
    return found[:limit]


def accuracy_gate(fp32: Path, converted: Path, feeds: list[dict], recipe: Recipe, *, diagnose: bool = True,
                  step: Callable[[], None] | None = None) -> GateReport:
    """Compare ``converted`` with ``fp32`` on ``feeds`` and judge against the recipe's thresholds.

    ``diagnose``: on failure, run the layer-wise search for the first diverging nodes. ``step`` ticks once per
    model run on a feed (2 x len(feeds) in all), for a progress bar.
    """
    thresholds = recipe.gate_thresholds.model_dump()
    if recipe.mode == "fp32":
        return GateReport("fp32", True, thresholds, note="fp32 recipe: the model is used as exported")
    if recipe.mode == "bf16":
        onnx.checker.check_model(str(converted))
        n = sum(1 for t in load_model(converted, weights=True).graph.initializer
                if t.data_type == onnx.TensorProto.BFLOAT16)
        return GateReport("bf16", None, thresholds, note=f"BF16 numerics not verified here: onnxruntime has no BF16 "
                          f"kernels on CPU. Checked: onnx.checker passes; {n} BF16 initializers. The engine check on "
                          "the target GPU is the first numeric comparison.")
    ref = reference(Path(fp32), feeds, step=step)
    graph = load_model(converted)  # read once: the runs and the overflow search below all take it
    got, counts = converted_outputs(Path(converted), feeds, list(ref), step=step, model=graph)
    source = load_model(fp32)
    name_nodes(source)  # unnamed nodes as the conversion named them
    check_output_names(recipe, [o.name for o in source.graph.output])
    ranges, axes, samples = output_ranges(source), batch_axes_of(Path(fp32), source), sample_count(source, feeds)
    meanings = output_meanings(source)
    figs = [output_figures(name, ref[name], got[name], recipe, *(
        (ranges[name][0], f"output of {ranges[name][1]}") if name in ranges else (None, "")),
        axis=axes.get(name, 0), samples=samples, meaning=meanings.get(name)) for name in ref]
    nonfinite = {k.split(":", 1)[1]: n for k, n in counts.items() if k.startswith("nonfinite:")}
    nonfinite = _beyond_fp32(Path(fp32), source, graph, feeds, nonfinite)
    overflows = _overflow_list(graph, nonfinite)
    figure_problems = figure_failures(figs, recipe)
    if figure_problems:  # the outputs are off: a -inf on the way may be why
        overflows += _overflow_list(graph, {k.split(":", 1)[1]: n for k, n in counts.items()
                                            if k.startswith("neginf:")}, limit=5 - len(overflows))
    failures = figure_problems + [f"{o['tensor']} (output of {o['node']}, {o['op']}): {o['issue']}"
                                  for o in overflows]
    report = GateReport(recipe.mode, not failures, thresholds, figs, failures)
    report.warnings = [f"output {f.output!r} is uninformative on these inputs: {f.uninformative}; {HELDOUT_ADVICE}"
                       for f in figs if f.uninformative]
    if not failures:
        report.warnings += _saturations(graph, counts, set(nonfinite))
    overflows = in_source_nodes(overflows, graph, {n.name for n in source.graph.node})
    if failures and diagnose:
        probe = worst_samples(source, feeds, ref, got, axes)
        report.diverging_nodes = (overflows + [d for d in layerwise_divergence(fp32, converted, probe)
                                               if d["node"] not in {o["node"] for o in overflows}])[:5]
    elif failures:
        report.diverging_nodes = overflows
    return report


def in_source_nodes(overflows: list[dict], converted: onnx.ModelProto, source: set[str]) -> list[dict]:
    """``overflows`` named by the FP32 model's own nodes (``source``), each named once.

    A node the conversion added (a Cast to FP16, a Quantize/DequantizeLinear pair) is traced back through its first
    input to the model's node that feeds it, or, on a weight's, forward to the node that reads it: the layer a user
    can keep in FP32 (``--keep-fp32``, auto-pin). Its issue says where the overflow was seen.
    """
    producer = {t: n for n in converted.graph.node for t in n.output}
    reader: dict[str, onnx.NodeProto] = {}
    for n in converted.graph.node:
        for t in n.input:
            reader.setdefault(t, n)
    named: dict[str, dict] = {}
    for o in overflows:
        node = producer.get(o["tensor"])
        found = node and (_walk(node, source, lambda n: producer.get(n.input[0]) if n.input else None)
                          or _walk(node, source, lambda n: reader.get(n.output[0]) if n.output else None))
        if found and found.name != o["node"]:
            o = {**o, "node": found.name, "op": found.op_type,
                 "issue": f"{o['issue']} (in {o['node']}, {o['op']}, which the conversion added)"}
        named.setdefault(o["node"], o)
    return list(named.values())


def _walk(node: onnx.NodeProto, source: set[str], step: Callable) -> onnx.NodeProto | None:
    """The first node of ``source`` from ``node`` on, taking ``step`` each time (None: none on the way)."""
    seen = set()
    while node is not None and node.name not in source and node.name not in seen:
        seen.add(node.name)
        node = step(node)
    return node if node is not None and node.name in source else None


def fp16_overflows(converted: Path, feeds: list[dict], limit: int = 5) -> list[dict]:
    """FP16 tensors of the converted graph that hold inf/NaN on the held-out data (see ``converted_outputs``)."""
    model = load_model(converted)
    _, counts = converted_outputs(Path(converted), feeds, [o.name for o in model.graph.output], model=model)
    return _overflow_list(model, {k.split(":", 1)[1]: n for k, n in counts.items() if k.startswith("nonfinite:")},
                          limit)
