"""``precision`` (convert and gate on CPU) and ``report`` (a run's accuracy, latency and changes)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    UNCHECKED_MODELOPT_OPT,
    app,
    err,
    fail,
    message_text,
    out,
    output_path,
    print_json,
    store_uri,
)

# `trtfarm precision`'s exit when the gate could not judge an output (no sample of its inputs carries signal there):
# neither a pass (0) nor a refusal of the conversion (1); README's command-line section lists it
NOT_JUDGED_EXIT = 4


@app.command()
def precision(
    model: Path = typer.Argument(..., exists=True, dir_okay=False, help="the FP32 ONNX export"),
    mode: str = typer.Option(..., "--mode", help="fp32 | fp16 | bf16 | int8 | fp8"),
    calibration: Path = typer.Option(None, "--calibration", exists=True, dir_okay=False,
                                     help=".npz keyed by input name (int8/fp8: required)"),
    heldout: Path = typer.Option(None, "--heldout", exists=True, dir_okay=False,
                                 help=".npz for the gate (default: generated, realistic masks)"),
    keep_fp32: list[str] = typer.Option([], "--keep-fp32", help="node-name regex kept in FP32 (repeat)"),
    keep_fp32_op: list[str] = typer.Option([], "--keep-fp32-op", help="op type kept in FP32 (repeat)"),
    data_max: float = typer.Option(512, "--data-max", help="AutoCast: keep nodes with |x| above this in FP32 "
                                                           "(inf: convert every node)"),
    auto_pin: bool = typer.Option(False, "--auto-pin", help="search the smallest FP32 node set that passes"),
    task: str = typer.Option("generic", "--task", help="embedding | classifier | generic (which figures to gate)"),
    output_range: list[str] = typer.Option([], "--output-range", help="NAME=LO:HI, the scale errors are measured "
                                           "against (default: implied by a Sigmoid/Softmax/Tanh, else FP32's range)"),
    max_error: float = typer.Option(None, "--max-error", min=0, help="|error| as a share of the output's scale, at "
                                    "the 99th percentile (default: the mode's, e.g. 0.01 for fp16)"),
    out_path: Path = typer.Option(None, "--out", help="converted ONNX [default: MODEL_<MODE>.onnx beside it]"),
    max_memory: str = typer.Option("4GiB", "--max-memory", help="memory the step may use: it gates on as many "
                                   "samples as fit, and refuses when not one does (e.g. 8GiB, 512MiB)"),
    unchecked_modelopt: bool = UNCHECKED_MODELOPT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Convert an ONNX export's precision with ModelOpt and gate its accuracy against FP32 on CPU.

    Exits 1 when the gate fails, 4 when it could not judge an output (no input sample carries signal there).
    """
    from typing import get_args

    from pydantic import ValidationError

    from trtfarm.precision.memory import parse_size
    from trtfarm.precision.recipe import Mode, Recipe
    from trtfarm.precision.step import convert_and_gate

    if mode not in get_args(Mode):
        raise fail(f"--mode {mode!r}: use one of {', '.join(get_args(Mode))}")
    if out_path is not None:
        output_path(out_path, "--out", folder=False)
    budget = parse_size(max_memory)
    try:
        recipe = Recipe(mode=mode, keep_fp32=keep_fp32, keep_fp32_ops=keep_fp32_op, data_max=data_max,
                        auto_pin=auto_pin, task=task, output_ranges=dict(_output_range(r) for r in output_range),
                        **({"thresholds": {"max_error": max_error}} if max_error is not None else {}))
    except ValidationError as e:
        raise fail("invalid recipe: " + "; ".join(f"{'.'.join(map(str, x['loc'])) or 'recipe'}: "
                                                   f"{x['msg'].removeprefix('Value error, ')}"
                                                   for x in e.errors())) from e
    calibration, heldout = _beside(model, "calib.npz", calibration), _beside(model, "heldout.npz", heldout)
    target = out_path or model.with_name(f"{model.stem}_{mode}.onnx")
    result = convert_and_gate(model, recipe, target, calibration=calibration, heldout=heldout, max_memory=budget,
                              unchecked_modelopt=unchecked_modelopt)
    if as_json:
        print_json(result.to_json())
    else:
        table = Table(title=message_text(f"{mode} accuracy gate: {model.name} -> {result.path.name}"))
        for col in ("output", "judged as", "deciding figures", "largest error / scale", "cosine (signal)"):
            table.add_column(col, overflow="fold")
        for f in result.report.figures:
            table.add_row(message_text(f.output), f.kind or "–", _deciding_cell(f), _error_cell(f), _signal_cell(f))
        if result.report.figures:
            out.print(table)
        out.print(message_text(result.summary()), highlight=False)
    if result.report.passed is False:
        raise typer.Exit(1)
    if result.report.verdict == "not judged":
        raise typer.Exit(NOT_JUDGED_EXIT)


def _beside(model: Path, name: str, given: Path | None) -> Path | None:
    """``given``, else ``name`` beside the model when it is there (as ``build`` finds it), said in one line."""
    if given is not None or not (found := model.with_name(name)).is_file():
        return given
    err.print(message_text(f"using {found} (beside the model); pass another with "
                           f"--{'calibration' if name == 'calib.npz' else 'heldout'}"), highlight=False,
              soft_wrap=not err.is_terminal)  # one line in a pipe: a path is never split
    return found


def _output_range(text: str) -> tuple[str, tuple[float, float]]:
    name, _, bounds = text.partition("=")
    try:
        low, high = (float(x) for x in bounds.split(":"))
    except ValueError as e:
        raise fail(f"--output-range {text!r}: write NAME=LO:HI, e.g. prob=0:1") from e
    return name, (low, high)


def _deciding_cell(f) -> str:
    """The figures that decide the output's verdict: decision flips, top-1, recall, the error at its quantile."""
    parts = [f"flips at {cut}: {share:.3%}" for cut, share in f.flips.items()]
    parts += [f"{k} {v:.4f}" for k, v in f.extra.items()]
    if f.quantile_error is not None and f.kind != "embedding":
        parts.append(f"p{f.error_quantile * 100:g} error {f.quantile_error:.2g}")
    if f.kind in ("values", "embedding"):
        parts.append("cosine")
    return ", ".join(parts) or "–"


def _error_cell(f) -> str:
    if f.max_error is None:
        return f"{f.max_abs:.3g} (abs)"
    return f"{f.max_abs:.3g} = {f.max_error:.2g} of {f.scale:.3g} ({f.scale_from})"


def _signal_cell(f) -> str:
    if f.signal_rows is None:
        return "–"
    if not f.signal_rows:
        return f"– (0/{f.rows}: no signal)"
    if f.same_for_every_sample:
        return f"– (the same output for all {f.rows} samples)"
    return f"{f.cosine_signal_mean:.6f} / {f.cosine_signal_min:.6f} ({f.signal_rows}/{f.rows})"


@app.command()
def report(ref: str = typer.Argument(..., help="a run id (reports/<model>/<run>/ in the store) or a model name"),
           out_dir: Path = typer.Option(Path("trtfarm-report"), "--out",
                                        help="where to write report.md, its charts and report.html"),
           store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Render a run's (or a model's latest) report: accuracy, p50/p99, memory, build time, changes, regressions.

    Writes report.md with its PNG charts and report.html, one self-contained page that opens in any browser.
    """
    from dataclasses import asdict

    from trtfarm.reports.report import write_report
    from trtfarm.reports.stored_outcomes import outcomes_for
    from trtfarm.store import open_store

    output_path(out_dir, "--out")
    s = open_store(store_uri(store))
    model, run, outcomes = outcomes_for(s, ref)
    written = write_report(s, model, run, outcomes, out_dir)
    path, rows = written.path, written.rows
    if as_json:
        print_json({"report": str(path), "html": str(path.with_name("report.html")),
                    "rows": [asdict(r) for r in rows]})
        return

    from trtfarm.cli.tables import Column, fitted_table, notes

    columns = [Column("target"), Column("status"), Column("precision", 6), Column("p50 ms", 5, "right"),
               Column("p99 ms", 5, "right"), Column("build s", 4, "right"), Column("engine", 2), Column("changes", 1)]
    cells = [{"target": escape(r.target), "status": r.status, "precision": escape(r.precision or "") or "–",
              "engine": message_text(r.engine),
              "p50 ms": f"{r.p50_ms:.3f}" if r.p50_ms is not None else "–",
              "p99 ms": f"{r.p99_ms:.3f}" if r.p99_ms is not None else "–",
              "build s": f"{r.build_s:.2f}" if r.build_s is not None else "–",
              "changes": ("[red]REGRESSION[/] " if r.regressed else "") + message_text(r.changes or r.reason)}
             for r in rows]
    table, dropped = fitted_table(out, columns, cells, title=escape(f"{model} — {run}"))
    out.print(table)
    under = []  # what did not fit beside the table, under it, each wrapped at its indent
    for r in rows:
        said = [text for col, text in (("engine", r.engine), ("changes", r.changes or r.reason))
                if col in dropped and text]
        if said:
            under.append((r.target, ("REGRESSION " if r.regressed and "changes" in dropped else "") + "; ".join(said)))
    notes(out, under)
    out.print(message_text(f"report: {path}"), highlight=False)
    out.print(message_text(f"html:   {path.with_name('report.html')} (open it in a browser)"), highlight=False)
    if written.note:
        err.print(message_text(written.note), highlight=False)
