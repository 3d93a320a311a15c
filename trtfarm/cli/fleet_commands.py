"""The fleet at a glance: ``trtfarm whatif`` (what a proposed fleet would do) and ``trtfarm status`` (the matrix).

Both read the store and write nothing to it. ``farm run --dry-run`` prints its decisions with ``print_decisions``.
"""

from __future__ import annotations

from functools import wraps
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    TARGETS_OPT,
    app,
    err,
    fail,
    message_text,
    out,
    output_path,
    print_json,
    store_uri,
    targets_path,
)
from trtfarm.cli.status_view import print_status
from trtfarm.cli.tables import Column, fitted_table, note_line, notes

WIDE_OPT = typer.Option(False, "--wide", help="every column, however wide the terminal")
VERBOSE_OPT = typer.Option(False, "--verbose", "-v", help="each retry of a store request that got no answer")
FOLD = 40  # more changes than this: the table groups them by target (``--json`` lists each pair)
ACTION_STYLE = {"rebuild": "yellow", "new": "cyan", "drop": "magenta", "keep": "green"}


def print_decisions(decisions, title: str, wide: bool = False) -> None:
    """The decisions of a what-if (or a dry run) for a terminal: the changes, the cost per pool, what keeps."""
    from trtfarm.vocabulary.fleetview import duration_text  # not on --help's path

    counts = ", ".join(f"{n} {a}" for a, n in decisions.counts().items() if n) or "nothing in scope"
    total = sum(decisions.pool_seconds().values())
    out.print(message_text(f"{title}: {counts}; estimated {duration_text(total)} of GPU time"), highlight=False)
    changed = decisions.changed()
    if not changed:
        out.print("no (model, target) changes: every plan in scope stays as it is", highlight=False)
    elif len(changed) <= FOLD or wide:
        _changes_table(changed, wide)
    else:
        _grouped_table(changed)
    candidates = sorted({d.model for d in changed if d.channel == "candidate" and d.action != "drop"})
    if candidates:
        out.print(message_text(f"released to candidate, not stable (farm.yaml declares promotion:): "
                               f"{', '.join(candidates)}; stable moves when the gates hold (`trtfarm promote`)"),
                  highlight=False)
    pools = decisions.pool_seconds()
    if pools:
        out.print("estimated build time per work pool:", highlight=False)
        table = Table()
        for col, justify in (("pool", "left"), ("builds", "right"), ("GPU time", "right")):
            table.add_column(col, justify=justify, no_wrap=True)
        for pool, seconds in pools.items():
            builds = sum(d.pool == pool and d.action in ("rebuild", "new") and d.basis_kind != "shared"
                         for d in decisions.decisions)
            table.add_row(escape(pool), str(builds), duration_text(seconds))
        out.print(table)
        bases = ", ".join(f"{n} {k}" for k, n in decisions.bases().items())
        out.print(message_text(f"estimates from: {bases} (--json and --html give each basis)"), highlight=False)
    kept = decisions.kept()
    keeps = [f"{t} ({'all ' if k == n else ''}{k}{'' if k == n else f' of {n}'})" for t, (k, _, n) in kept.items()
             if k]
    unbuilt = [f"{t} ({u} of {n})" for t, (_, u, n) in kept.items() if u]
    if keeps:
        out.print(message_text("keep their plans: " + ", ".join(keeps)), highlight=False)
    if unbuilt:
        out.print(message_text("unchanged by this fleet, not built yet for the current exports (the next run builds "
                               "them anyway): "
                               + ", ".join(unbuilt)), highlight=False)
    for line in decisions.serving:
        out.print(message_text(f"serving: {line}"), highlight=False)
    for line in decisions.refused:
        out.print("[bold red]refused:[/] " + message_text(line), highlight=False)
    if decisions.triton:
        names = list(decisions.triton)
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        out.print(message_text(f"Triton repositories that change: {len(names)} ({shown}); rerun `trtfarm triton "
                               "MODEL` after the builds"), highlight=False)


def _changes_table(changed, wide: bool) -> None:
    from trtfarm.vocabulary.fleetview import duration_text  # not on --help's path

    columns = [Column("model", 4), Column("target"), Column("action"), Column("estimate", 3, "right"),
               Column("what changes", 1)]
    cells = [{"model": escape(d.model), "target": escape(d.target),
              "action": f"[{ACTION_STYLE[d.action]}]{d.action}[/]", "estimate": duration_text(d.estimate_s)
              if d.basis_kind != "shared" else "shared", "what changes": message_text("; ".join(d.reasons))}
             for d in changed]
    table, dropped = fitted_table(out, columns, cells, wide=wide)
    out.print(table)
    if "what changes" in dropped or "model" in dropped:  # under the table, wrapped lines keeping their indent
        notes(out, [(f"{d.model}/{d.target}", "; ".join(d.reasons)) for d in changed])


def _grouped_table(changed) -> None:
    from trtfarm.vocabulary.fleetview import duration_text  # not on --help's path

    groups: dict[tuple, list] = {}
    for d in changed:
        groups.setdefault((d.target, d.action, d.reasons[0] if d.reasons else ""), []).append(d)
    columns = [Column("target"), Column("action"), Column("models", 3, "right"), Column("GPU time", 2, "right"),
               Column("what changes", 1)]
    cells = [{"target": escape(t), "action": f"[{ACTION_STYLE[a]}]{a}[/]", "models": str(len(ds)),
              "GPU time": duration_text(sum(d.estimate_s or 0 for d in ds)), "what changes": message_text(why)}
             for (t, a, why), ds in groups.items()]
    table, dropped = fitted_table(out, columns, cells)
    out.print(table)
    if "what changes" in dropped:
        notes(out, [(f"{t} ({a})", why) for (t, a, why) in groups])
    out.print(message_text(f"{len(changed)} (model, target) changes in {len(groups)} groups; --json lists each pair "
                           "with its reasons and estimate"), highlight=False)


@app.command("whatif")
def whatif(models: list[str] = typer.Argument(None, help="models to look at (default: every model in the store)"),
           fleet: Path = typer.Option(..., "--fleet", metavar="PROPOSED.yaml", help="the proposed fleet file"),
           html: Path = typer.Option(None, "--html", metavar="DIR", help="also write whatif.html (with a chart of "
                                     "GPU-minutes per pool) into DIR"),
           store: str = STORE_OPT, targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT,
           wide: bool = WIDE_OPT, verbose: bool = VERBOSE_OPT) -> None:
    """What a run under a proposed fleet would do: which plans rebuild, keep, are new or dropped, why, and the cost.

    Compares the fleet as it is (--targets-file) with PROPOSED.yaml against the store, and estimates each build from
    the build times manifests record. Reads the store; writes nothing to it.
    """
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.state.views import plan_fleet
    from trtfarm.store import open_store

    if html:
        output_path(html, "--html")  # a folder: checked before any work
    from trtfarm.cli.progress_bars import store_retries  # rich.progress: not for --help

    store_retries(err, verbose)
    current = load_fleet(targets_path(targets_file))
    proposed = load_fleet(fleet)
    with err.status("reading the store's listings and manifests", spinner="dots"):
        decisions = plan_fleet(open_store(store_uri(store)), current, proposed, models or [])
    written = _plan_page(decisions, fleet, html) if html else None
    if as_json:
        print_json([d.to_json() for d in decisions.decisions])
    else:
        print_decisions(decisions, f"whatif {fleet.name}", wide)
    if written:
        err.print(message_text(f"html: {written} (open it in a browser)"), highlight=False)


@wraps(whatif)
def _plan(*args, **kwargs) -> None:
    err.print("`trtfarm plan` is now `trtfarm whatif`", markup=False, highlight=False)
    whatif(*args, **kwargs)


app.command("plan", hidden=True)(_plan)  # the what-if's name until it collided with the engine plan: still works


def _plan_page(decisions, fleet: Path, folder: Path) -> Path:
    from trtfarm.reports.fleet_html import plan_html, pool_chart

    try:
        folder.mkdir(parents=True, exist_ok=True)
        chart = pool_chart(decisions, folder)
        page = folder / "whatif.html"
        page.write_text(plan_html(f"trtfarm whatif: {fleet.name}", decisions, chart))
    except OSError as e:
        raise fail(f"--html {folder}: cannot write there ({e.strerror}); give a folder you can write to") from e
    return page


@app.command("status")
def status(models: list[str] = typer.Argument(None, help="models to show (default: every model in the store)"),
           html: Path = typer.Option(None, "--html", metavar="FILE", help="also write the matrix as one "
                                     "self-contained HTML page (e.g. status.html)"),
           store: str = STORE_OPT, targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT,
           wide: bool = WIDE_OPT, verbose: bool = VERBOSE_OPT,
           record: bool = typer.Option(False, "--record", help="first compute each model's state from the store's "
                                       "records and record it in the store (state/), as every run does")) -> None:
    """Every model x target at a glance: released (age, precision, engine check, signature), stale, failed, missing.

    Reads the store (each model's recorded state where it is current); writes nothing to it unless --record.
    """
    from trtfarm.cli.fleet_source import view_fleet
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.publishing.release import who
    from trtfarm.state.recorder import record_states
    from trtfarm.state.views import status as fleet_status
    from trtfarm.store import open_store

    if html:
        output_path(html, "--html", folder=False)  # a file: checked before any work
    from trtfarm.cli.progress_bars import store_retries  # rich.progress: not for --help

    store_retries(err, verbose)
    opened = open_store(store_uri(store))
    path, fleet = view_fleet(targets_file, opened)  # no fleet file here: the fleet the store's runs recorded
    trust = signing_settings(path, only="trust").trusted_keys()
    if record:
        signer = signing_settings(path, only="key", fleet=fleet).signer()
        with err.status("recording each model's state in the store", spinner="dots"):
            done = record_states(opened, fleet, models or None, by=f"trtfarm status --record ({who()})",
                                 signer=signer, trust=trust if signer else None)
        err.print(message_text(f"recorded the state of {len(done)} model(s) in {opened.uri}"), highlight=False)
    with err.status("reading the store's listings and manifests", spinner="dots"):
        found = fleet_status(opened, fleet, models or [], trust=trust)
    for note in found.notes:
        note_line(err, "note:", message_text(note))
    if html:
        from trtfarm.reports.fleet_html import status_html

        try:
            html.write_text(status_html(found))
        except OSError as e:
            raise fail(f"--html {html}: cannot write it ({e.strerror}); give a file you can write") from e
    for problem in found.problems:
        note_line(err, "skipped:", message_text(problem))
    if as_json:
        print_json([c.to_json() for c in found.cells])
    else:
        print_status(found, wide)
    if html:
        err.print(message_text(f"html: {html} (open it in a browser)"), highlight=False)
