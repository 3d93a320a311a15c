"""``build``, ``targets``, ``plans`` and ``show``: local builds and what the store holds."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
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
    verify_store: bool = typer.Option(False, "--verify-store", help="re-hash each published plan before calling it "
                                      "up to date; a damaged one is rebuilt (default: its size is checked)"),
    record: bool = typer.Option(False, "--record", help="run as a build-matrix flow recorded on the Prefect server "
                                "at $PREFECT_API_URL (never an ephemeral server)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="with --record: show Prefect's logs"),
) -> None:
    """Build MODEL for the fleet in this process; targets already published are up to date and skipped."""
    from trtfarm.planning.requests import MatrixRequest

    request = MatrixRequest(model=str(model), name=name, targets=target, precision=_mode(precision),
                            profiles=_profile_texts(profile, profiles), store=store_uri(store),
                            targets_file=targets_path(targets_file), dispatch="local", verify_store=verify_store)
    if not model.is_file():
        raise fail(f"{model}: no such ONNX file")
    rows = _record(request, verbose) if record else _run_here(request)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        outcome_table(rows, store_uri(store))
    failed = [r for r in rows if r["status"] == "failed"]
    for r in failed:
        err.print(f"[bold red]{escape(r['target'])} failed:[/] {escape(r['reason'])}", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def _run_here(request) -> list[dict]:
    from trtfarm.cli.progress import RichBuild, progress_bars, upload_bar
    from trtfarm.pipeline import run_local

    with progress_bars(err) as bars:
        # the run's outcomes go to the store; `trtfarm report MODEL_OR_RUN` renders charts and HTML on demand
        return run_local(request, progress=lambda t: RichBuild(bars, t), upload=upload_bar(bars), report="outcomes")


def _record(request, verbose: bool) -> list[dict]:
    """The same build as a build-matrix flow run on the configured Prefect server (opt-in)."""
    import asyncio
    import os

    if not os.environ.get("PREFECT_API_URL"):
        raise fail("--record needs a Prefect server: set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api) to a "
                   "running `prefect server start`; trtfarm never starts an ephemeral one")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from flows.build_matrix import build_matrix

    return asyncio.run(build_matrix(request))


def _profile_texts(profile_args: list[str], profiles_file: Path | None) -> list[dict]:
    """Profiles given on the command line, as text; empty: the model's farm.yaml (or shapes.jsonl) decides."""
    from trtfarm.profiles.profile import load_profiles_file, profile_from_args, profile_texts

    if profile_args and profiles_file:
        raise fail("give either --profile flags or --profiles FILE, not both")
    if profiles_file:
        return profile_texts(load_profiles_file(profiles_file).profiles)
    return profile_texts([profile_from_args(profile_args)]) if profile_args else []


def _mode(mode: str | None) -> str | None:
    from typing import get_args

    from trtfarm.precision.recipe import Mode

    modes = get_args(Mode)
    if mode and mode not in modes:
        raise fail(f"--precision {mode!r}: use one of {', '.join(modes)}")
    return mode


STYLE = {"built": "green", "up-to-date": "cyan", "skipped": "yellow", "failed": "bold red"}
MARK = {"passed": "[green]✓[/]", "failed": "[red]✗[/]", "pending": "[yellow]…[/]", "not_run": "-"}


def _note(r: dict, store: str) -> str:
    """The first clause of the reason, and for a published plan its manifest key (what `trtfarm show` takes)."""
    note = r["reason"].splitlines()[0].split(";")[0] if r["reason"] else ""
    if r["status"] in ("built", "up-to-date") and r.get("manifest"):
        key = "plans/" + r["manifest"].split("/plans/", 1)[-1]
        note = f"{note} · {key}" if note and r["status"] == "built" else key
    return note


def outcome_table(rows: list[dict], store: str) -> None:
    """The outcome of each target; below 110 columns the notes go under the table, one line per target."""
    wide = out.width >= 110
    table = Table(title=f"trtfarm build → {escape(store)}", caption="checks: onnx / built / engine / api (… = pending "
                  "on the target GPU; api: checked against the version's bindings API)")
    for col, kw in (("target", {"no_wrap": True}), ("status", {"no_wrap": True}), ("build s", {"justify": "right"}),
                    ("plan", {"justify": "right", "no_wrap": True}), ("checks", {"no_wrap": True})):
        table.add_column(col, **kw)
    if wide:
        table.add_column("note", overflow="fold")
    for r in rows:
        cells = [escape(r["target"]), f"[{STYLE[r['status']]}]{r['status']}[/]",
                 f"{r['build_s']:.2f}" if r.get("build_s") is not None else "",
                 f"{r['plan_bytes'] / 2**20:.1f} MiB" if r.get("plan_bytes") else "",
                 " ".join(MARK[v] for v in (r.get("verification") or {}).values())]
        table.add_row(*cells, *([escape(_note(r, store))] if wide else []))
    out.print(table)
    if not wide:
        for r in rows:
            out.print(f"  {r['target']}: {_note(r, store)}", highlight=False, soft_wrap=True, markup=False)
    counts = {s: sum(r["status"] == s for r in rows) for s in STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    hint = " (`trtfarm targets` says what each skipped target needs)" if counts["skipped"] else ""
    out.print(f"{summary}{hint}", highlight=False)


@app.command()
def targets(targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Show the fleet's targets and which ones this machine can build."""
    from trtfarm.planning.fleet import bindings_api_check, load_fleet, select_targets
    from trtfarm.planning.targets import local_capabilities, serve_check

    try:
        resolved = select_targets(load_fleet(targets_path(targets_file)))
    except TrtfarmError as e:
        raise fail(e) from e
    caps = local_capabilities()
    rows = [{"target": t.id, "gpu": t.gpu_key, "gpu_name": t.gpu.nvml_name, "compute_capability":
             t.gpu.compute_capability, "toolchain": t.toolchain_label, "pool": t.gpu.pool,
             "compat_class": t.compat_class, "servable": (reason := serve_check(t, caps)) is None,
             "reason": reason or "", "api_checked": (api := bindings_api_check(t.toolchain.flavour,
                                                                                t.toolchain.version))[0] is True,
             "api_check": api[1]} for t in resolved]
    if as_json:
        print(json.dumps({"machine": {"gpus": caps.gpus.describe(), "toolchains": caps.versions}, "targets": rows},
                         indent=2))
        return
    wide = out.width >= 140  # below that: the columns that fit one line per target, and the reasons underneath
    cols = ("target", "gpu", "cc", "toolchain", "pool", "class", "api", "here") if wide else (
        "target", "gpu", "toolchain", "api", "here")
    table = Table(title=f"targets ({caps.gpus.describe()})", caption="api: the code path was checked against this "
                  "TensorRT version's own bindings API (names and signatures; not built, not run on a GPU)")
    for col in cols:
        table.add_column(col, no_wrap=col != "here", overflow="fold")
    for r in rows:
        here = "[green]yes[/]" if r["servable"] else "[yellow]no[/]" + (f": {r['reason']}" if wide else "")
        cells = {"target": r["target"], "gpu": r["gpu"] if wide else f"{r['gpu']} ({r['compute_capability']})",
                 "cc": r["compute_capability"], "toolchain": r["toolchain"], "pool": r["pool"],
                 "class": r["compat_class"], "here": here,
                 "api": ("[green]✓ bindings[/]" if wide else "[green]✓[/]") if r["api_checked"] else "-"}
        table.add_row(*(cells[c] for c in cols))
    out.print(table)
    if not wide:  # the reasons on their own lines, so the table stays one line per target
        for r in rows:
            if not r["servable"]:
                out.print(f"  {r['target']}: {r['reason']}", highlight=False, soft_wrap=True, markup=False)


@app.command()
def plans(store: str = STORE_OPT, model: str = typer.Option(None, "--model", help="only this model"),
          as_json: bool = JSON_OPT) -> None:
    """List the published plans in the store."""
    from trtfarm.publishing.catalog import list_manifests

    try:
        found = list_manifests(store_uri(store), model)
    except TrtfarmError as e:
        raise fail(e) from e
    if as_json:
        print(json.dumps([{"manifest": url, **m.model_dump(mode="json")} for url, m in found], indent=2))
        return
    table = Table(title=f"plans in {escape(store_uri(store))}")
    for col in ("model", "onnx", "gpu", "toolchain", "build", "size", "engine check", "created"):
        table.add_column(col, overflow="fold")
    for _, m in found:
        table.add_row(escape(m.model.name), m.model.onnx_digest[:12], escape(m.target.gpu),
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
        raise fail(e) from e
    if as_json:
        print(m.to_json().decode(), end="")
        return
    from trtfarm.publishing.catalog import manifest_table

    out.print(manifest_table(url, m))

