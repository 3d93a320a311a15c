"""Precision as a property of the ONNX: ModelOpt conversion and an accuracy gate, before any engine exists.

``prepare_precision`` is the step the matrix runs once per model and recipe: convert, gate, and store the converted
ONNX with its report under a content address, so the same recipe on the same export is converted once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from trtfarm.errors import IntegrityError, UserInputError
from trtfarm.identity import canonical_json, sha256_file
from trtfarm.identity import onnx_digest as digest_of
from trtfarm.layout import converted_model_key, converted_prefix, converted_report_key
from trtfarm.onnxfile import external_files, load_model
from trtfarm.precision.autopin import auto_pin
from trtfarm.precision.child import result_in_child
from trtfarm.precision.convert import (
    QUANTIZE,
    REFERENCE_BATCHES,
    ConversionError,
    Converted,
    convert_onnx,
    refuse_unconvertible,
)
from trtfarm.precision.deferred import torch_unasked
from trtfarm.precision.fixes import way_forward
from trtfarm.precision.gate import GateReport, OutputFigures, accuracy_gate
from trtfarm.precision.inputs import (
    batch_axes,
    batches,
    fixed_batch,
    generated_inputs,
    model_inputs,
    probe,
    sample_shapes,
    symbol_sizes,
    tied_batch,
)
from trtfarm.precision.library_versions import COMPARED, FLAG, refuse_unchecked
from trtfarm.precision.memory import DEFAULT_BUDGET, plan_memory
from trtfarm.precision.nodes import NodePrecision
from trtfarm.precision.npzdata import load_npz
from trtfarm.precision.progress import precision_progress
from trtfarm.precision.recipe import GateFailed, Recipe, Thresholds
from trtfarm.precision.workarounds import modelopt_as_shipped
from trtfarm.scratch import scratch_dir
from trtfarm.store import AlreadyExists

__all__ = ["ConversionError", "GateFailed", "PrecisionResult", "Recipe", "Thresholds", "convert_and_gate",
           "prepare_precision", "stored_result"]


@dataclass
class PrecisionResult:
    """A converted model, its gate report, and the nodes auto-pin kept in FP32."""

    recipe: Recipe
    path: Path
    digest: str
    report: GateReport
    pinned: list[str]
    reused: bool = False
    nodes: NodePrecision | None = None
    notes: list[str] = field(default_factory=list)
    # a failed gate's way forward: the failing outputs, the costliest layers and the commands that would fix it
    fix: dict = field(default_factory=dict)
    # the libraries run at another version than the workarounds were compared with (``--unchecked-modelopt``)
    unchecked_versions: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        """``precision --json``: the converted model, its node precision, what was normalised, the gate, the fix."""
        return {"converted": str(self.path), "digest": self.digest, "pinned_fp32_nodes": self.pinned,
                "nodes": self.nodes.to_json() if self.nodes else None, "notes": self.notes,
                "gate": self.report.to_json(), "fix": self.fix or None,
                "unchecked_versions": self.unchecked_versions or None}

    def _unchecked(self) -> list[str]:
        """The warning a run with ``--unchecked-modelopt`` on other versions carries."""
        if not self.unchecked_versions:
            return []
        ran = ", ".join(f"{name} {v} (compared: {COMPARED.get(name, '?')})"
                        for name, v in self.unchecked_versions.items())
        return [f"converted with {FLAG}: {ran}"]

    def summary(self) -> str:
        """One paragraph for people: pass/fail, the failing outputs, the first diverging nodes, warnings."""
        r = self.report
        if r.passed is None:
            return r.note
        warnings = "".join(f" Warning: {w}." for w in [*r.warnings, *self._unchecked()])
        nodes = f" {self.nodes.text(self.recipe.mode)}." if self.nodes and self.nodes.compute_nodes else ""
        notes = "".join(f" Note: {n}." for n in self.notes)
        if r.passed:
            figs = "; ".join(_figure_text(f) for f in r.figures)
            return f"{self.recipe.mode} gate passed ({figs or r.note}).{nodes}{notes}{warnings}"
        diverging = "; ".join(f"{d['node']} ({d['op']}): {d['issue']}" for d in r.diverging_nodes) or "none found"
        fix = (f"`{self.fix['auto_pin']}`" + (f", or keep those layers in FP32: `{self.fix['keep_fp32']}`"
                                              if self.fix.get("keep_fp32") else "")) if self.fix else \
            "--auto-pin, or keep those nodes in FP32 with --keep-fp32 REGEX"
        return (f"{self.recipe.mode} accuracy gate failed: {'; '.join(r.failures)}. Layers that cost the most "
                f"accuracy: {diverging}.{nodes} Fix: {fix}." + notes + warnings)


def _figure_text(f: OutputFigures) -> str:
    """``prob (probability): decisions at 0.3 change on 0.010%; error 0.0012 of scale 1 at the 99th ...``.

    The figures that decide the output's verdict come first, with the largest single error beside them.
    """
    if f.signal_rows is None:  # a report stored before scales and signal rows were measured
        return f"{f.output}: cosine mean {f.cosine_mean:.6f}, min {f.cosine_min:.6f}"
    cosine = (f"cosine mean {f.cosine_signal_mean:.6f}, min {f.cosine_signal_min:.6f} over {f.signal_rows}/{f.rows} "
              "samples with signal" if f.signal_rows else f"cosine not judged: no sample of {f.rows} carries signal")
    largest = f"largest error {f.max_abs:.3g} = {f.max_error:.3g} of scale {f.scale:.3g} ({f.scale_from})"
    if not f.kind:  # stored before outputs had kinds
        return f"{f.output}: max error {f.max_abs:.3g} = {f.max_error:.3g} of scale {f.scale:.3g}; {cosine}"
    parts = [f"decisions at {cut} change on {share:.3%}" for cut, share in f.flips.items()]
    parts += [f"{k} {v:.4f}" for k, v in f.extra.items()]
    if f.kind in ("values", "embedding"):
        parts.append(cosine)
    if f.quantile_error is not None and f.kind != "embedding":
        parts.append(f"error {f.quantile_error:.3g} of scale at the {f.error_quantile * 100:g}th percentile")
    return f"{f.output} ({f.kind}): {'; '.join(parts + [largest])}"


def gate_inputs(model_path: Path, heldout: Path | None, notes: list[str] | None = None,
                budget: int = DEFAULT_BUDGET) -> list[dict]:
    """Held-out inputs from ``heldout.npz``, else generated ones that follow the model's shape rules.

    Generated sizes are checked with a one-row onnxruntime run first (``probe``: it retries once with the size
    onnxruntime names, and a batch an input fixes is the feeds' batch), after a memory check that refuses a model of
    which not even one sample fits ``budget`` (``memory``); ``notes`` receives what was decided (fewer samples for a
    large input, or for the memory budget, and which held-out samples were used). Every tensor is held for the first
    ``REFERENCE_BATCHES`` batches only (AutoCast's reference run; the layer-wise search at most one batch).
    """
    model, path = load_model(model_path), str(model_path)
    notes = [] if notes is None else notes
    axes, rows = batch_axes(model), fixed_batch(model) or 1
    if heldout:
        data = _within(model, load_npz(heldout, model, "held-out data"), budget, path, f"held-out data {heldout.name}",
                       notes, REFERENCE_BATCHES * feed_batch(model))
        return batches(data, feed_batch(model), set(model_inputs(model)) - set(axes), axes)
    from trtfarm.precision.runs import infer

    try:
        first = sample_shapes(model, symbol_sizes(model, 64)[0], rows, path)
    except UserInputError:  # said in the generator's own words below
        first = None
    if first:
        plan_memory(model, first, rows, budget, path)  # before the probe allocates anything
    probed = probe(model, lambda feed: infer(model_path, [feed]), path=path, notes=notes)
    tied = tied_batch(model, probed.tie)
    per_feed = tied[1] if tied else feed_batch(model)
    rows = tied[1] if tied else rows
    plan = plan_memory(model, sample_shapes(model, probed.sizes, rows, path), rows, budget, path,
                       held=REFERENCE_BATCHES * per_feed)
    made = generated_inputs(model, sizes=probed.sizes, path=path, fits=(plan.samples, plan.why()), batch=tied)
    notes += made.notes
    return batches(made.data, per_feed, made.unbatched, made.axes)


def feed_batch(model: onnx.ModelProto) -> int:
    """The samples a feed holds: a static export's own batch, else 16."""
    return fixed_batch(model) or 16


def calibration_feeds(model_path: Path, calibration: Path, budget: int = DEFAULT_BUDGET,
                      notes: list[str] | None = None) -> list[dict]:
    """The calibration ``.npz`` as batches (a static export's own batch; scalars given whole with each)."""
    model = load_model(model_path)
    data = _within(model, load_npz(calibration, model, "calibration data"), budget, str(model_path),
                   f"calibration data {calibration.name}", [] if notes is None else notes)
    axes = batch_axes(model)
    return batches(data, feed_batch(model), set(model_inputs(model)) - set(axes), axes)


def _within(model: onnx.ModelProto, data: dict, budget: int, path: str, what: str, notes: list[str],
            held: int | None = None) -> dict:
    """``data``'s first samples, as many as the memory budget holds, and a note when fewer than all.

    The note names the samples used and those left out, by their indices along the batch axis of ``what`` (the
    ``.npz``, named).

    ``held``: the most samples whose every tensor the step holds at once (None: all, as calibration holds them).
    """
    axes, rows = batch_axes(model), fixed_batch(model) or 1
    shapes = {n: [rows if i == axes.get(n) else d for i, d in enumerate(a.shape)] for n, a in data.items()}
    plan = plan_memory(model, shapes, rows, budget, path, held=held)
    count = next((a.shape[axes[n]] for n, a in data.items() if n in axes), 0)
    if count <= plan.samples:
        return data
    keep = max(rows, plan.samples // rows * rows)
    notes.append(f"{what}: used samples {_span(0, keep)} of {count}, left out {_span(keep, count)} (indices along "
                 f"its batch axis): {plan.why()}")
    return {n: a[(slice(None),) * axes[n] + (slice(0, keep),)] if n in axes else a for n, a in data.items()}


def _span(start: int, stop: int) -> str:
    """Sample indices ``start`` to ``stop - 1``, for people: ``0-1``, ``7``."""
    return f"{start}" if stop - start == 1 else f"{start}-{stop - 1}"


def convert_and_gate(src: Path, recipe: Recipe, out: Path, *, calibration: Path | None = None,
                     heldout: Path | None = None, max_memory: int = DEFAULT_BUDGET, unchecked_modelopt: bool = False,
                     workarounds: bool = True) -> PrecisionResult:
    """Convert ``src`` by ``recipe`` into ``out`` and run the gate (auto-pin when the recipe asks).

    ``max_memory``: the bytes the step may hold (``memory``): it gates on as many samples as fit.

    ``out`` may not be any file the step reads (the export, its external data, the calibration or held-out data):
    that is refused before anything is written. So is a ModelOpt, onnxruntime or Polygraphy other than the versions
    the workarounds were compared with (``library_versions``), unless ``unchecked_modelopt``: the result names them.

    The conversion and the gate run in a process of their own (``child``), with ModelOpt's workarounds, its unused
    imports deferred and the allocator tuned there only; this process gets the result, or the step's error of the
    same kind with the same message. ``workarounds=False``: ModelOpt's own functions, none replaced (the referee
    tests and bench/precision_speed.py compare with).
    """
    _refuse_overwriting_inputs(src, out, calibration=calibration, heldout=heldout)
    unchecked = refuse_unchecked(unchecked_modelopt)
    result = result_in_child(_isolated_step, src, recipe, out, calibration=calibration, heldout=heldout,
                             max_memory=max_memory, workarounds=workarounds)
    return replace(result, unchecked_versions=unchecked) if unchecked else result


def _isolated_step(src: Path, recipe: Recipe, out: Path, *, calibration: Path | None, heldout: Path | None,
                   max_memory: int, workarounds: bool) -> PrecisionResult:
    """``_convert_and_gate`` in the step's own process: Polygraphy's torch question imports no torch (``deferred``).

    ``workarounds=False``: ModelOpt's own functions run (``workarounds.modelopt_as_shipped``).
    """
    with torch_unasked(), contextlib.nullcontext() if workarounds else modelopt_as_shipped():
        return _convert_and_gate(src, recipe, out, calibration=calibration, heldout=heldout, max_memory=max_memory)


def _convert_and_gate(src: Path, recipe: Recipe, out: Path, *, calibration: Path | None, heldout: Path | None,
                      max_memory: int) -> PrecisionResult:
    """``convert_and_gate`` once ``out`` is known not to be a file it reads."""
    try:
        model = load_model(src)
    except (DecodeError, OSError, ValueError) as err:  # protobuf could not parse it, or the file is unreadable
        raise ConversionError(f"{src}: not a valid ONNX model ({type(err).__name__}); re-export it") from err
    refuse_unconvertible(src, model, recipe)  # already quantized, or ai.onnx.ml operators: said before any data
    del model
    notes: list[str] = []
    calib = calibration_feeds(src, calibration, max_memory, notes) if calibration else None
    feeds = gate_inputs(src, heldout, notes, max_memory)
    with precision_progress() as progress:
        if recipe.auto_pin and recipe.mode != "fp32":
            with scratch_dir("trtfarm-autopin-") as tmp:
                found = auto_pin(src, recipe, tmp, feeds, progress, calibration=calib)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(found.converted.path.read_bytes())
            conv = found.converted
            return PrecisionResult(recipe, out, conv.digest, found.report, found.pinned, nodes=conv.nodes,
                                   notes=[*conv.notes, *notes, *found.notes])
        with progress.stage(f"{recipe.mode}: converting with ModelOpt"):
            conv: Converted = convert_onnx(src, recipe, out, feeds=calib if recipe.mode in QUANTIZE else feeds)
        runs = 2 * len(feeds) if recipe.mode not in ("fp32", "bf16") else 0
        with progress.stage(f"{recipe.mode}: comparing with FP32 on {len(feeds)} batches", runs) as step:
            report = accuracy_gate(src, conv.path, feeds, recipe, step=step)
    return PrecisionResult(recipe, conv.path, conv.digest, report, [], nodes=conv.nodes,
                           notes=[*conv.notes, *notes],
                           fix=way_forward(src, recipe, report, calibration=calibration, heldout=heldout))


def _refuse_overwriting_inputs(src: Path, out: Path, **data: Path | None) -> None:
    """``UserInputError`` when ``out`` is (symlinks resolved) the export, one of its data files, or a gate input."""
    target = Path(out).resolve()
    reads = {"the FP32 export": Path(src)}
    try:
        reads.update({f"its external data {name!r}": path for name, path in external_files(Path(src))})
    except (OSError, ValueError, DecodeError, UserInputError):  # unreadable: convert_and_gate says so in its own words
        pass
    reads.update({f"the {what} data": path for what, path in data.items() if path is not None})
    for what, path in reads.items():
        if Path(path).resolve() == target:
            raise UserInputError(f"--out {out}: that is {what} ({path}), which the conversion and its gate read; "
                                 "write the converted model elsewhere (default: MODEL_<mode>.onnx beside it)")


# the gate's rules: a step judged under other rules is judged again (2: each output in its task's terms)
GATE_RULES = 2


def precision_key(recipe: Recipe, onnx_digest: str, calibration: Path | None, heldout: Path | None) -> str:
    """Content address of one precision step: export, full recipe, calibration and held-out data."""
    return precision_key_of(recipe, onnx_digest, sha256_file(calibration) if calibration else None,
                            sha256_file(heldout) if heldout else None)


def precision_key_of(recipe: Recipe, onnx_digest: str, calibration_sha256: str | None,
                     heldout_sha256: str | None) -> str:
    """``precision_key`` from the data files' sha256s (as a registered export's record lists them)."""
    doc = {"onnx": onnx_digest, "recipe": recipe.model_dump(mode="json"), "calibration": calibration_sha256,
           "heldout": heldout_sha256, "gate": GATE_RULES}
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def stored_result(store, prefix: str, recipe: Recipe, path: Path) -> tuple[PrecisionResult, str] | None:
    """The recorded result of the step at ``prefix`` and its model's sha256, or None; reads one object only.

    ``path``: where the converted model is to lie on this machine (nothing is downloaded here).
    """
    stored = store.get(converted_report_key(prefix))
    if stored is None:
        return None
    doc = json.loads(stored.data)
    report = GateReport(**{**doc["report"], "figures": [OutputFigures(**f) for f in doc["report"]["figures"]]})
    nodes = NodePrecision(**doc["nodes"]) if doc.get("nodes") else None
    return PrecisionResult(recipe, path, doc["digest"], report, doc["pinned"], reused=True, nodes=nodes,
                           notes=doc.get("notes", []), fix=doc.get("fix") or {},
                           unchecked_versions=doc.get("unchecked_versions") or {}), doc["sha256"]


def prepare_precision(store, model_name: str, src: Path, onnx_digest: str, recipe: Recipe, work: Path, *,
                      calibration: Path | None = None, heldout: Path | None = None,
                      key: str | None = None, max_memory: int | None = None,
                      unchecked_modelopt: bool = False) -> PrecisionResult:
    """The matrix's precision step: reuse the stored result of this exact step, or convert, gate and store it.

    A failing gate raises ``GateFailed`` (its report is stored too, for diagnosis). ``key``: the step's
    ``precision_key``, when the caller computed it already. ``max_memory``: the bytes the step may hold (None: the
    default budget); it decides how many samples are gated, not what is converted, so it is no part of the key.
    ``unchecked_modelopt``: run on other library versions than the workarounds were compared with
    (``library_versions``); the stored record names them.
    """
    if recipe.mode == "fp32" and not recipe.auto_pin:
        return PrecisionResult(recipe, src, onnx_digest, accuracy_gate(src, src, [], recipe), [])
    key = key or precision_key(recipe, onnx_digest, calibration, heldout)
    prefix = converted_prefix(model_name, onnx_digest, key)
    stored = stored_result(store, prefix, recipe, work / "model.onnx")
    if stored is not None:
        result, sha256 = stored
        if result.report.passed is False:
            raise GateFailed(result.summary())
        store.download_file(converted_model_key(prefix), result.path, sha256=sha256)
        return result
    work.mkdir(parents=True, exist_ok=True)  # shared by builds of this step on this machine: written whole, by rename
    with scratch_dir(".converting-", work) as tmp:
        result = convert_and_gate(src, recipe, tmp / "model.onnx", calibration=calibration, heldout=heldout,
                                  max_memory=max_memory or DEFAULT_BUDGET, unchecked_modelopt=unchecked_modelopt)
        if result.path.parent == tmp:
            os.replace(result.path, work / "model.onnx")
            result = replace(result, path=work / "model.onnx")
    if result.report.passed is not False:
        try:
            store.upload_file(converted_model_key(prefix), result.path)
        except AlreadyExists:  # another worker converted the same step first: readers get its bytes, and so do we
            store.download_file(converted_model_key(prefix), result.path)
            result = replace(result, digest=digest_of(result.path))
    doc = {"digest": result.digest, "sha256": sha256_file(result.path), "pinned": result.pinned,
           "recipe": recipe.model_dump(mode="json"), "report": result.report.to_json(),
           "nodes": result.nodes.to_json() if result.nodes else None, "notes": result.notes, "fix": result.fix,
           **({"unchecked_versions": result.unchecked_versions} if result.unchecked_versions else {})}
    if not store.put_if_absent(converted_report_key(prefix), json.dumps(doc, indent=2).encode()):
        stored = json.loads(store.get(converted_report_key(prefix)).data)
        if result.report.passed is not False and stored["sha256"] != doc["sha256"]:
            raise IntegrityError(f"{store.url(prefix)}: report.json records sha256 {stored['sha256'][:12]} but "
                                 f"model.onnx there is {doc['sha256'][:12]}; delete the folder to convert again")
    if result.report.passed is False:
        raise GateFailed(result.summary())
    return result
