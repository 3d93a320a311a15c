"""``build``, ``targets``, ``plans`` and ``show``: local builds and what the store holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    TARGETS_OPT,
    UNCHECKED_MODELOPT_OPT,
    app,
    err,
    fail,
    message_text,
    note_new_store,
    onnx_not_found,
    out,
    print_json,
    store_is_empty,
    store_uri,
    targets_path,
)
from trtfarm.cli.tables import Column, fitted_table, labelled, lines_keeping_indent, notes

if TYPE_CHECKING:  # the command imports what it runs when it runs (`trtfarm --help` needs none of it)
    from trtfarm.vocabulary.target_outcome import RunRow, TargetOutcome


@app.command()
def build(
    model: Path = typer.Argument(..., help="the ONNX export (farm.yaml beside it is read)"),
    name: str = typer.Option(None, "--name", help="model name in the store"),
    profile: list[str] = typer.Option([], "--profile",
                                      help="INPUT=MIN:OPT:MAX, e.g. input_ids=1x16:16x128:32x512; repeat per input"),
    profiles: Path = typer.Option(None, "--profiles", exists=True, dir_okay=False,
                                  help="a profiles YAML (`trtfarm profiles derive` writes one)"),
    target: list[str] = typer.Option([], "--target", help="target id (repeat); default: every target"),
    precision: str = typer.Option(None, "--precision", help="fp32|fp16|bf16|int8|fp8 \\[default: farm.yaml's, else "
                                  "fp32]; another recipe than farm.yaml's is a trial build: it moves no pointer"),
    calibration: Path = typer.Option(None, "--calibration", exists=True, dir_okay=False,
                                     help="calibration .npz keyed by input name (int8/fp8) "
                                     "\\[default: farm.yaml's, else calib.npz beside the model]"),
    heldout: Path = typer.Option(None, "--heldout", exists=True, dir_okay=False,
                                 help="held-out .npz for the accuracy gate \\[default: farm.yaml's, "
                                 "else heldout.npz beside the model, else generated inputs]"),
    max_memory: str = typer.Option(None, "--max-memory", help="memory the precision step may use: it gates on as "
                                   "many samples as fit, and refuses when not one does (e.g. 8GiB) \\[default: 4GiB]"),
    unchecked_modelopt: bool = UNCHECKED_MODELOPT_OPT,
    release: bool = typer.Option(None, "--release/--trial", help="move the release pointers for this recipe (--release)"
                                 " or for none (--trial) \\[default: only for the model's declared recipe]"),
    wide: bool = typer.Option(False, "--wide", help="every column, however wide the terminal"),
    store: str = STORE_OPT,
    targets_file: Path = TARGETS_OPT,
    as_json: bool = JSON_OPT,
    verify_store: bool = typer.Option(False, "--verify-store", help="re-hash each published plan before calling it "
                                      "up to date; a damaged one is rebuilt (default: its size is checked)"),
    record: bool = typer.Option(False, "--record", help="run as a build-matrix flow recorded on the Prefect server "
                                "at $PREFECT_API_URL (never an ephemeral server)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="each skipped target's whole reason, and TensorRT's "
                                 "whole log (VERBOSE) on stderr; with --record (the builds run on the workers): "
                                 "Prefect's logs"),
) -> None:
    """Build MODEL for the fleet in this process; targets already published are up to date and skipped."""
    from trtfarm.planning.requests import MatrixRequest

    if not model.is_file():
        raise fail(f"{model}: {onnx_not_found(model)}")
    request = MatrixRequest(model=str(model), name=name, targets=target, precision=_mode(precision),
                            profiles=_profile_texts(profile, profiles), store=store_uri(store, creates=True),
                            targets_file=targets_path(targets_file), dispatch="local", verify_store=verify_store,
                            calibration=str(calibration) if calibration else None,
                            heldout=str(heldout) if heldout else None, release=release,
                            max_memory=_budget(max_memory), unchecked_modelopt=unchecked_modelopt)
    if verbose:  # TensorRT filters its own log: without --verbose only its errors leave the library
        from trtfarm.cli.progress_bars import store_retries
        from trtfarm.toolchain.trtlog import set_log_severity

        set_log_severity("VERBOSE")
        store_retries(err, verbose)  # each retry of a store request, as status -v shows them
    was_empty = store_is_empty(request.store)
    rows = _record(request, verbose) if record else _run_here(request)
    note_new_store(request.store, was_empty)
    if as_json:
        print_json([r.to_json() for r in rows])
    else:
        outcome_table([r.outcome for r in rows], store_uri(store, check=False), wide, verbose, str(model))
    failed = [r.outcome for r in rows if r.outcome.status == "failed"]
    for o in failed:  # one line each for logs and pipes; on a terminal each line wraps at its own indent
        lines_keeping_indent(err, o.reason, first=f"[bold red]{escape(o.target)} failed:[/] ")
    if failed:
        raise typer.Exit(1)
    if rows and all(r.outcome.status == "skipped" for r in rows):  # a CI job on this host must not pass
        fixes = "; ".join(f"{', '.join(ids)}: {fix}" for fix, ids in skip_fixes([r.outcome for r in rows]).items())
        raise fail(f"nothing was built: this machine can build none of the {len(rows)} target(s); {fixes}")


def _run_here(request) -> list[RunRow]:
    from trtfarm.pipeline import run_local

    if not err.is_terminal:  # logs and pipes get no progress display: nothing to draw it with is imported
        return run_local(request, report="outcomes")
    from trtfarm.cli.progress_bars import RichBuild, progress_bars, upload_bar

    with progress_bars(err) as bars:
        # the run's outcomes go to the store; `trtfarm report MODEL_OR_RUN` renders charts and HTML on demand
        return run_local(request, progress=lambda t: RichBuild(bars, t), upload=upload_bar(bars), report="outcomes")


def _record(request, verbose: bool) -> list[RunRow]:
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


def skip_fixes(rows: list[TargetOutcome]) -> dict[str, list[str]]:
    """What each skipped target needs (its ``fix``, else its reason), and the targets that need it."""
    fixes: dict[str, list[str]] = {}
    for o in rows:
        if o.status == "skipped":
            fixes.setdefault(o.fix or o.headline, []).append(o.target)
    return fixes


def _note(o: TargetOutcome) -> str:
    """The first clause of the reason, and for a published plan its ``MODEL/GPU/BUILD`` (what `trtfarm show` takes).

    A skip's fix (what to install) is left to ``skip_fixes``: said once for the targets that share it.
    """
    from trtfarm.layout import short_ref

    note = o.headline.removesuffix(f"; {o.fix}")  # a skip's cause ends with its fix
    if o.status in ("built", "up-to-date") and o.manifest_key:
        ref = short_ref(o.manifest_key)
        note = f"{note} · {ref}" if note and o.status == "built" else ref
    return note


def _skipped_notes(rows: list[TargetOutcome]) -> list[tuple[str, str]]:
    """The skipped targets, one line per reason (versions left out): how many, and why (``--verbose``: each)."""
    import re

    by_reason: dict[str, list[str]] = {}
    for o in rows:
        if o.status == "skipped":
            by_reason.setdefault(re.sub(r" \d+(\.\d+)+", "", _note(o)), []).append(o.target)
    return [(f"{len(ids)} skipped", why) for why, ids in by_reason.items()]


def outcome_table(rows: list[TargetOutcome], store: str, wide: bool = False, verbose: bool = False,
                  model: str | None = None) -> None:
    """The outcome of each target; the notes go under the table when they do not fit beside it, one line each.

    What the skipped targets need is said once per fix with ``verbose`` (else ``trtfarm targets`` says it); a plan
    its precision gate holds, with the fix (``model``: the export as given, for ``build ... --release``).
    """
    from trtfarm.cli.release_lines import held_by_gate, release_lines

    columns = [Column("target"), Column("status"), Column("build s", 3, "right"), Column("plan", 2, "right"),
               Column("checks", 4), Column("note", 1)]
    cells = [{"target": escape(o.target), "status": f"[{STYLE[o.status]}]{o.status}[/]",
              "build s": f"{o.build_s:.2f}" if o.build_s is not None else "",
              "plan": f"{o.plan_bytes / 2**20:.1f} MiB" if o.plan_bytes else "",
              "checks": " ".join(MARK[v] for v in o.verification.values()),
              "note": message_text(_note(o))} for o in rows]
    table, dropped = fitted_table(out, columns, cells, title=f"trtfarm build → {escape(store)}", wide=wide)
    out.print(table)
    labelled(out, " ", "[dim]checks: onnx / built / engine / api (… = pending on the target GPU)[/]")
    if "note" in dropped:
        notes(out, [(o.target, _note(o)) for o in rows if verbose or o.status != "skipped"])
        if not verbose:
            notes(out, _skipped_notes(rows))
    if verbose:
        notes(out, [(f"to build {', '.join(ids)}", fix) for fix, ids in skip_fixes(rows).items()])
    release_lines(rows, model)
    counts = {s: sum(o.status == s for o in rows) for s in STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    held = sum(o.release is not None and (o.release.action == "refused" or held_by_gate(o.release))
               for o in rows)  # said above, counted here
    summary += f"; {held} not released" if held else ""
    hint = " (--verbose or `trtfarm targets`: what they need)" if counts["skipped"] and not verbose else ""
    out.print(message_text(f"{summary}{hint}"), highlight=False)


@app.command()
def targets(targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT,
            wide: bool = typer.Option(False, "--wide", help="every column, however wide the terminal")) -> None:
    """Show the fleet's targets and which ones this machine can build."""
    from trtfarm.machine.capabilities import local_capabilities
    from trtfarm.project.buildable import serve_gap
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.vocabulary.fleet import bindings_api_check, select_targets
    from trtfarm.vocabulary.targets import ServeGap

    resolved = select_targets(load_fleet(targets_path(targets_file)))
    caps = local_capabilities()
    gaps = {t.id: serve_gap(t, caps) for t in resolved}
    rows = [{"target": t.id, "gpu": t.gpu_key, "gpu_name": t.gpu.nvml_name, "compute_capability":
             t.gpu.compute_capability, "toolchain": t.toolchain_label, "pool": t.gpu.pool,
             "compat_class": t.compat_class, "servable": gaps[t.id] is None,
             "reason": (gaps[t.id] or ServeGap("")).reason, "fix": (gaps[t.id] or ServeGap("")).fix,
             "api_checked": (api := bindings_api_check(t.toolchain.flavour, t.toolchain.version))[0] is True,
             "api_check": api[1], **device_match(t, caps.gpus)} for t in resolved]
    if as_json:
        machine = {"gpus": caps.gpus.describe(), "toolchains": dict(caps.versions), "driver": caps.gpus.driver,
                   "devices": [g.identity() for g in caps.gpus.gpus]}
        print_json({"machine": machine, "targets": rows})
        return
    for g in caps.gpus.gpus:  # wrapped beside its label, never under it
        labelled(out, "this machine:", message_text(device_line(g)))
    columns = [Column("target"), Column("gpu"), Column("cc", 3), Column("toolchain", 6), Column("pool", 2),
               Column("class", 1), Column("api", 5), Column("device", 4), Column("here"), Column("why not", 0)]
    cells = [{"target": escape(r["target"]), "gpu": escape(r["gpu"]), "cc": r["compute_capability"],
              "device": {"no": "[yellow]no[/]"}.get(r["device_serves"], r["device_serves"]),
              "toolchain": escape(r["toolchain"]), "pool": escape(r["pool"]), "class": escape(r["compat_class"]),
              "here": "[green]yes[/]" if r["servable"] else "[yellow]no[/]", "why not": message_text(r["reason"]),
              "api": "[green]✓ bindings[/]" if r["api_checked"] else "-"} for r in rows]
    table, dropped = fitted_table(out, columns, cells, title=f"targets ({escape(caps.gpus.describe())})", wide=wide,
                                  caption="api: the code path was checked against this TensorRT version's own "
                                  "bindings API (names and signatures; not built, not run on a GPU)")
    out.print(table)
    if "why not" in dropped:  # the reasons on their own lines, one a target, so the table stays one line a row
        notes(out, [(r["target"], r["reason"].removesuffix(f"; {r['fix']}") if r["fix"] else r["reason"])
                    for r in rows if not r["servable"]])
    fixes: dict[str, list[str]] = {}
    for r in rows:
        if not r["servable"] and r["fix"]:
            fixes.setdefault(r["fix"], []).append(r["target"])
    notes(out, [(f"to build {', '.join(ids)}", fix) for fix, ids in fixes.items()])
    if dropped:
        out.print(f"(--wide adds {', '.join(dropped)})", highlight=False)


def device_match(t, gpus) -> dict:
    """How this machine's best device serves target ``t``: exact (PCI id), group, class, name or no, and why."""
    from trtfarm.machine.match import best_fit
    from trtfarm.vocabulary.device_spec import spec_of_target

    found = best_fit(spec_of_target(t), gpus)
    return {"pci_ids": list(t.gpu.pci_ids), "mig": t.mig, "serves": [t.gpu_key, *(k for k, _ in t.group)],
            "device_serves": found.how, "device_reason": found.reason}


def device_line(g) -> str:
    """One device's identity for people: name, PCI ids, CC, memory, SMs, ECC, MIG."""
    sms = f"{g.sm_count} SMs" if g.sm_count else "SMs unknown"
    ecc = {True: "ECC on", False: "ECC off", None: "no ECC mode"}[g.ecc]
    mig = {True: "MIG on", False: "MIG off", None: "no MIG mode"}[g.mig_mode]
    inst = f" (instance {g.mig.profile})" if g.mig else ""
    return (f"{g.name}, PCI {g.pci_device_id or '?'} (subsystem {g.pci_subsystem_id or '?'}), cc "
            f"{g.compute_capability}, {g.memory_gib:.1f} GiB, {sms}, {ecc}, {mig}{inst}")


@app.command()
def plans(store: str = STORE_OPT, model: str = typer.Option(None, "--model", help="only this model"),
          as_json: bool = JSON_OPT,
          wide: bool = typer.Option(False, "--wide", help="every column, however wide the terminal")) -> None:
    """List the published plans in the store; released: what serving hosts of that GPU and toolchain pull."""
    from trtfarm.layout import parse_plan_key, short_ref
    from trtfarm.publishing.catalog import list_manifests
    from trtfarm.publishing.release import list_pointers
    from trtfarm.store import open_store

    if model:  # a misspelt model names the nearest of every channel (exit 2), not an empty table
        from trtfarm.cli.names import check_models

        check_models(open_store(store_uri(store)), [model])
    found = list_manifests(store_uri(store), model)
    released = {p.manifest for p in list_pointers(open_store(store_uri(store)), model)}
    if as_json:
        print(json.dumps([{"manifest": url, **m.model_dump(mode="json")} for _, url, m in found], indent=2))
        return
    columns = [Column("plan (trtfarm show)"), Column("toolchain", 5), Column("precision"), Column("released"),
               Column("engine", 3), Column("size", 2, "right"), Column("onnx", 1), Column("created", 4)]
    cells = []
    for key, _, m in found:
        cells.append({"plan (trtfarm show)": escape(short_ref(key)), "precision": m.precision.recipe,
                      "toolchain": escape(f"{_short_flavour(m.target.flavour)} {m.target.toolchain_version}"),
                      "released": "[green]yes[/]" if key in released else "",
                      "engine": m.verification.engine.status, "size": f"{m.plan.bytes / 2**20:.1f} MiB",
                      "onnx": (parse_plan_key(key) or [None, m.model.onnx_digest[:12]])[1],
                      "created": m.created_at[:16].replace("T", " ")})
    table, dropped = fitted_table(out, columns, cells, title=f"plans in {escape(store_uri(store))}", wide=wide)
    out.print(table)
    if dropped:
        out.print(f"(--wide adds {', '.join(dropped)})", highlight=False)


def _short_flavour(flavour: str) -> str:
    return {"tensorrt_rtx": "rtx", "tensorrt": "trt"}.get(flavour, flavour)


@app.command()
def show(manifest: str = typer.Argument(..., help="manifest: a store key, file:// or s3:// URL, or a local path"),
         store: str = STORE_OPT, as_json: bool = JSON_OPT,
         provenance: bool = typer.Option(False, "--provenance", help="with --json: print the provenance statement "
                                         "(in-toto, SLSA provenance v1) instead of the manifest")) -> None:
    """Print one manifest and its provenance (who built the plan, from what)."""
    from trtfarm.publishing.catalog import load_attested

    url, m, prov = load_attested(manifest, store_uri(store, check=store is not None))
    from trtfarm.publishing.catalog import manifest_table, provenance_mismatch, provenance_table

    try:
        mismatch = provenance_mismatch(prov, m) if prov else None
        table = provenance_table(prov) if prov else None
    except (KeyError, TypeError, AttributeError, IndexError) as e:  # untrusted JSON whose fields have other types
        raise fail(f"{url}: the provenance beside it is not a readable SLSA statement ({type(e).__name__}: {e})",
                   code=1) from e
    if as_json and provenance:
        if prov is None:
            raise fail(f"{url}: no provenance beside this manifest (published before trtfarm recorded it)", code=1)
        print(json.dumps(prov, indent=2))
    elif as_json:
        print(m.to_json().decode(), end="")
    else:
        out.print(manifest_table(url, m))
        out.print(table or "provenance: none beside this manifest (published before trtfarm recorded it)",
                  highlight=False)
    if mismatch:
        raise fail(f"{url}: {mismatch}", code=1)


def _budget(text: str | None) -> int | None:
    """``--max-memory`` in bytes (precision/memory.py imports numpy: only when the option is given)."""
    if not text:
        return None
    from trtfarm.precision.memory import parse_size

    return parse_size(text)
