"""``trtfarm`` command line. Heavy modules (Prefect, TensorRT, onnx) are imported inside the commands."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from trtfarm.errors import TrtfarmError, UserInputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Build, validate and publish TensorRT-family plans for every GPU x toolchain in a fleet.")
out = Console()
err = Console(stderr=True)

STORE_OPT = typer.Option(None, "--store", help="artifact store: a path, file:///abs or s3://bucket/prefix "
                                               "[default: $TRTFARM_STORE or ./trtfarm-store]")
TARGETS_OPT = typer.Option(None, "--targets-file", help="gpu_targets.yaml [default: $TRTFARM_TARGETS or "
                                                        "./gpu_targets.yaml]")
JSON_OPT = typer.Option(False, "--json", help="machine-readable output on stdout")


def _store_uri(store: str | None) -> str:
    return store or os.environ.get("TRTFARM_STORE") or "trtfarm-store"


def _targets_file(path: Path | None) -> str:
    return str(path or os.environ.get("TRTFARM_TARGETS") or "gpu_targets.yaml")


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def build(
    model: Path = typer.Argument(..., help="the ONNX export (farm.yaml beside it is read)"),
    name: str = typer.Option(None, "--name", help="model name in the store"),
    profile: list[str] = typer.Option([], "--profile",
                                      help="INPUT=MIN:OPT:MAX, e.g. input_ids=1x16:16x128:32x512; repeat per input"),
    profiles: Path = typer.Option(None, "--profiles", help="a profiles YAML (`trtfarm profiles derive` writes one)"),
    target: list[str] = typer.Option([], "--target", help="target id (repeat); default: every target"),
    precision: str = typer.Option(None, "--precision", help="fp32|fp16|bf16|int8|fp8 (default: farm.yaml's)"),
    store: str = STORE_OPT,
    targets_file: Path = TARGETS_OPT,
    as_json: bool = JSON_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="show Prefect's logs"),
) -> None:
    """Build MODEL for the fleet in local mode; targets already published are up to date and skipped."""
    from flows.local import run_local_build

    try:
        rows = run_local_build(model, name=name, profile_args=profile, profiles_file=profiles, targets=target,
                               store=_store_uri(store), precision=_mode(precision),
                               targets_file=_targets_file(targets_file), verbose=verbose, console=err)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        _outcome_table(rows, _store_uri(store))
    if any(r["status"] == "failed" for r in rows):
        for r in rows:
            if r["status"] == "failed":
                err.print(f"[bold red]{r['target']} failed:[/] {r['reason']}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _mode(mode: str | None) -> str | None:
    from typing import get_args

    from trtfarm.precision.recipe import Mode

    modes = get_args(Mode)
    if mode and mode not in modes:
        raise _fail(f"--precision {mode!r}: use one of {', '.join(modes)}")
    return mode


def _outcome_table(rows: list[dict], store: str) -> None:
    style = {"built": "green", "up-to-date": "cyan", "skipped": "yellow", "failed": "bold red"}
    mark = {"passed": "[green]✓[/]", "failed": "[red]✗[/]", "pending": "[yellow]…[/]", "not_run": "-"}
    table = Table(title=f"trtfarm build → {store}", caption="checks: onnx / built / engine (… = pending on the "
                  "target GPU)")
    columns = (("target", {"no_wrap": True}), ("status", {"no_wrap": True}), ("build s", {"justify": "right"}),
               ("plan", {"justify": "right", "no_wrap": True}), ("checks", {"no_wrap": True}),
               ("note", {"overflow": "fold"}))
    for col, kw in columns:
        table.add_column(col, **kw)
    for r in rows:
        size = f"{r['plan_bytes'] / 2**20:.1f} MiB" if r.get("plan_bytes") else ""
        checks = " ".join(mark[v] for v in (r.get("verification") or {}).values())
        note = r["reason"].splitlines()[0].split(";")[0] if r["reason"] else ""
        if r["status"] in ("built", "up-to-date") and r.get("manifest"):
            note = (note + "\n" if note and r["status"] == "built" else "") + r["manifest"].split("/plans/", 1)[-1]
        table.add_row(r["target"], f"[{style[r['status']]}]{r['status']}[/]",
                      f"{r['build_s']:.2f}" if r.get("build_s") is not None else "", size, checks, note)
    out.print(table)
    counts = {s: sum(r["status"] == s for r in rows) for s in style}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    hint = " (`trtfarm targets` says what each skipped target needs)" if counts["skipped"] else ""
    out.print(f"{summary}{hint}", highlight=False)


@app.command()
def targets(targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Show the fleet's targets and which ones this machine can build."""
    from trtfarm.fleet import load_fleet, select_targets
    from trtfarm.matrix import local_capabilities, serve_check

    try:
        resolved = select_targets(load_fleet(_targets_file(targets_file)))
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    caps = local_capabilities()
    rows = [{"target": t.id, "gpu": t.gpu_key, "gpu_name": t.gpu.nvml_name, "compute_capability":
             t.gpu.compute_capability, "toolchain": t.toolchain_label, "pool": t.gpu.pool,
             "compat_class": t.compat_class, "servable": (reason := serve_check(t, caps)) is None,
             "reason": reason or ""} for t in resolved]
    if as_json:
        print(json.dumps({"machine": {"gpus": caps.gpus.describe(), "toolchains": caps.versions}, "targets": rows},
                         indent=2))
        return
    table = Table(title=f"targets ({caps.gpus.describe()})")
    for col in ("target", "gpu", "cc", "toolchain", "pool", "class", "here"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["target"], r["gpu"], r["compute_capability"], r["toolchain"], r["pool"], r["compat_class"],
                      "[green]yes[/]" if r["servable"] else f"[yellow]no[/]: {r['reason']}")
    out.print(table)


@app.command()
def plans(store: str = STORE_OPT, model: str = typer.Option(None, "--model", help="only this model"),
          as_json: bool = JSON_OPT) -> None:
    """List the published plans in the store."""
    from trtfarm.catalog import list_manifests

    try:
        found = list_manifests(_store_uri(store), model)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps([{"manifest": url, **m.model_dump(mode="json")} for url, m in found], indent=2))
        return
    table = Table(title=f"plans in {_store_uri(store)}")
    for col in ("model", "onnx", "gpu", "toolchain", "build", "size", "engine check", "created"):
        table.add_column(col, overflow="fold")
    for _, m in found:
        table.add_row(m.model.name, m.model.onnx_digest[:12], m.target.gpu,
                      f"{m.target.flavour} {m.target.toolchain_version}", m.build.build_digest[:12],
                      f"{m.plan.bytes / 2**20:.1f} MiB", m.verification.engine.status, m.created_at)
    out.print(table)


@app.command()
def show(manifest: str = typer.Argument(..., help="manifest: a store key, file:// or s3:// URL, or a local path"),
         store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Print one manifest."""
    from trtfarm.catalog import load_manifest

    try:
        url, m = load_manifest(manifest, _store_uri(store))
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(m.to_json().decode(), end="")
        return
    from trtfarm.catalog import manifest_table

    out.print(manifest_table(url, m))


profiles_app = typer.Typer(no_args_is_help=True, help="Optimization profiles from logged request shapes.")
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("derive")
def profiles_derive(
    log: Path = typer.Argument(..., help="shape log: JSONL ({\"input_ids\": [16, 87], ...} per line) or CSV"),
    cap: list[str] = typer.Option([], "--cap", help="hard cap INPUT:DIM=N, e.g. input_ids:1=512 (repeat)"),
    max_batch: int = typer.Option(None, "--max-batch", min=1, help="largest batch the server forms"),
    granularity: int = typer.Option(16, "--granularity", min=1, help="bucket size for non-batch dimensions"),
    max_profiles: int = typer.Option(2, "--max-profiles", min=1, max=4, help="most profiles to consider"),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="per-context budget: batch x length"),
    model: Path = typer.Option(None, "--model", help="the ONNX, for activation-memory estimates"),
    out: Path = typer.Option(None, "--out", help="write the profiles YAML here"),
    as_json: bool = JSON_OPT,
) -> None:
    """Derive optimization profiles (one, or more when traffic has regimes) from a shape log."""
    from trtfarm.derive import (
        Constraints,
        derivation_file,
        derive_profiles,
        onnx_activation_bytes,
        parse_cap,
        write_profiles_file,
    )
    from trtfarm.shapelog import read_shape_log

    try:
        constraints = Constraints(caps=dict(parse_cap(c) for c in cap), max_batch=max_batch,
                                  granularity=granularity, max_profiles=max_profiles, max_tokens=max_tokens)
        derived = derive_profiles(read_shape_log(log), constraints, onnx_activation_bytes(model) if model else None)
        doc = derivation_file(derived, str(log))
        if out:
            write_profiles_file(doc, out)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps({"profiles": [{n: r.text() for n, r in p.root.items()} for p in doc.profiles],
                          "buckets": doc.buckets, "report": doc.report}, indent=2))
        return
    from trtfarm.catalog import derivation_table

    out_note = f"; written to {out}" if out else "; use --out FILE to save it"
    Console().print(derivation_table(derived, str(log)))
    err.print(f"{derived.records:,} records, {derived.rejected:,} beyond the caps{out_note}", highlight=False)


def main() -> None:
    """Console entry point."""
    try:
        app()
    except UserInputError as e:  # pragma: no cover - commands convert these themselves
        err.print(f"error: {e}")
        sys.exit(2)


from trtfarm import cli_farm, cli_ops  # noqa: E402,F401 - register their commands on `app`
