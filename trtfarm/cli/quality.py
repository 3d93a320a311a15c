"""``precision`` (convert and gate on CPU) and ``report`` (a run's accuracy, latency and changes)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from trtfarm.cli.common import JSON_OPT, STORE_OPT, app, fail, out, store_uri
from trtfarm.errors import TrtfarmError


@app.command()
def precision(
    model: Path = typer.Argument(..., help="the FP32 ONNX export"),
    mode: str = typer.Option(..., "--mode", help="fp32 | fp16 | bf16 | int8 | fp8"),
    calibration: Path = typer.Option(None, "--calibration", help=".npz keyed by input name (int8/fp8: required)"),
    heldout: Path = typer.Option(None, "--heldout", help=".npz for the gate (default: generated, realistic masks)"),
    keep_fp32: list[str] = typer.Option([], "--keep-fp32", help="node-name regex kept in FP32 (repeat)"),
    keep_fp32_op: list[str] = typer.Option([], "--keep-fp32-op", help="op type kept in FP32 (repeat)"),
    data_max: float = typer.Option(512, "--data-max", help="AutoCast: keep nodes with |x| above this in FP32 "
                                                           "(inf: convert every node)"),
    auto_pin: bool = typer.Option(False, "--auto-pin", help="search the smallest FP32 node set that passes"),
    task: str = typer.Option("generic", "--task", help="embedding | classifier | generic (which figures to gate)"),
    out_path: Path = typer.Option(None, "--out", help="converted ONNX [default: MODEL_<mode>.onnx beside it]"),
    as_json: bool = JSON_OPT,
) -> None:
    """Convert an ONNX export's precision with ModelOpt and gate its accuracy against FP32 on CPU."""
    from trtfarm.precision import convert_and_gate
    from trtfarm.precision.recipe import Recipe

    try:
        recipe = Recipe(mode=mode, keep_fp32=keep_fp32, keep_fp32_ops=keep_fp32_op, data_max=data_max,
                        auto_pin=auto_pin, task=task)
    except ValueError as e:
        raise fail(f"invalid recipe: {e}") from e
    target = out_path or model.with_name(f"{model.stem}_{mode}.onnx")
    try:
        result = convert_and_gate(model, recipe, target, calibration=calibration, heldout=heldout)
    except TrtfarmError as e:
        raise fail(str(e)) from e
    if as_json:
        print(json.dumps({"converted": str(result.path), "digest": result.digest, "pinned_fp32_nodes": result.pinned,
                          "gate": result.report.to_json()}, indent=2))
    else:
        table = Table(title=f"{mode} accuracy gate: {model.name} -> {result.path.name}")
        for col in ("output", "cosine mean", "cosine min", "max abs", "max rel", "task figure"):
            table.add_column(col)
        for f in result.report.figures:
            table.add_row(f.output, f"{f.cosine_mean:.6f}", f"{f.cosine_min:.6f}", f"{f.max_abs:.3g}",
                          f"{f.max_rel:.3g}", ", ".join(f"{k} {v:.4f}" for k, v in f.extra.items()))
        if result.report.figures:
            out.print(table)
        out.print(result.summary(), highlight=False)
    if result.report.passed is False:
        raise typer.Exit(1)


@app.command()
def report(ref: str = typer.Argument(..., help="a run id (reports/<model>/<run>/ in the store) or a model name"),
           out_dir: Path = typer.Option(Path("trtfarm-report"), "--out",
                                        help="where to write report.md, its charts and report.html"),
           store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Render a run's (or a model's latest) report: accuracy, p50/p99, memory, build time, changes, regressions.

    Writes report.md with its PNG charts and report.html, one self-contained page that opens in any browser.
    """
    from dataclasses import asdict

    from trtfarm.store import open_store
    from trtfarm.validation.report import outcomes_for, row_for, write_report

    try:
        s = open_store(store_uri(store))
        model, run, outcomes = outcomes_for(s, ref)
        path = write_report(s, model, run, outcomes, out_dir)
    except TrtfarmError as e:
        raise fail(str(e)) from e
    rows = [row_for(s, o) for o in outcomes]
    if as_json:
        print(json.dumps({"report": str(path), "html": str(path.with_name("report.html")),
                          "rows": [asdict(r) for r in rows]}, indent=2))
        return
    table = Table(title=f"{model} — {run}")
    for col in ("target", "status", "engine", "p50 ms", "p99 ms", "build s", "changes"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.target, r.status, r.engine, f"{r.p50_ms:.3f}" if r.p50_ms is not None else "–",
                      f"{r.p99_ms:.3f}" if r.p99_ms is not None else "–",
                      f"{r.build_s:.2f}" if r.build_s is not None else "–",
                      ("[red]REGRESSION[/] " if r.regressed else "") + (r.changes or r.reason))
    out.print(table)
    out.print(f"report: {path}", highlight=False)
    out.print(f"html:   {path.with_name('report.html')} (open it in a browser)", highlight=False)
