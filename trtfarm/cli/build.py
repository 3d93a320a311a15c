"""``build``, ``targets``, ``plans`` and ``show``: local builds and what the store holds."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from trtfarm.cli.common import JSON_OPT, STORE_OPT, TARGETS_OPT, app, err, fail, out, store_uri, targets_path
from trtfarm.errors import TrtfarmError


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
                               store=store_uri(store), precision=_mode(precision),
                               targets_file=targets_path(targets_file), verbose=verbose, console=err)
    except TrtfarmError as e:
        raise fail(str(e)) from e
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        _outcome_table(rows, store_uri(store))
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
        raise fail(f"--precision {mode!r}: use one of {', '.join(modes)}")
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
    from trtfarm.planning.fleet import load_fleet, select_targets
    from trtfarm.planning.targets import local_capabilities, serve_check

    try:
        resolved = select_targets(load_fleet(targets_path(targets_file)))
    except TrtfarmError as e:
        raise fail(str(e)) from e
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
    from trtfarm.publishing.catalog import list_manifests

    try:
        found = list_manifests(store_uri(store), model)
    except TrtfarmError as e:
        raise fail(str(e)) from e
    if as_json:
        print(json.dumps([{"manifest": url, **m.model_dump(mode="json")} for url, m in found], indent=2))
        return
    table = Table(title=f"plans in {store_uri(store)}")
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
    from trtfarm.publishing.catalog import load_manifest

    try:
        url, m = load_manifest(manifest, store_uri(store))
    except TrtfarmError as e:
        raise fail(str(e)) from e
    if as_json:
        print(m.to_json().decode(), end="")
        return
    from trtfarm.publishing.catalog import manifest_table

    out.print(manifest_table(url, m))

