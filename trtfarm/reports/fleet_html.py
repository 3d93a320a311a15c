"""The fleet views as self-contained HTML pages: ``status.html`` (the matrix) and the what-if plan with its chart.

One file each, no script, no network: styles inline, the chart a ``data:image/png`` URI. Every user string is escaped.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from trtfarm import layout_shared
from trtfarm.errors import html_text, plain_text
from trtfarm.reports.html import data_uri
from trtfarm.reports.report import NO_CHARTS, charts_available
from trtfarm.store import Conflict, Store
from trtfarm.vocabulary.fleetview import (
    NOTHING_RELEASED,
    STATES,
    FleetDecisions,
    FleetStatus,
    TargetStatus,
    age_text,
    duration_text,
)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem;color:#1f2328}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:1.8rem}
.meta{color:#59636e;font-size:.9rem}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #d1d9e0;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}thead th.t{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
td.c{text-align:center;white-space:nowrap;font-variant-numeric:tabular-nums}td.num{text-align:right}
.released{background:#dafbe1}.pending{background:#fff8c5}.stale{background:#ffebe9;color:#953800}
.failed{background:#cf222e;color:#fff;font-weight:600}
.refused,.damaged{background:#8250df;color:#fff;font-weight:600}.missing{background:#f6f8fa;color:#59636e}
.none{background:#fff;color:#d1d9e0}.legend span{display:inline-block;padding:.1rem .5rem;margin-right:.4rem}
ul{padding-left:1.4rem}li{margin:.15rem 0}
"""

CELL_TEXT = {"released": "ok", "pending": "pend", "stale": "stale", "failed": "FAIL", "refused": "REFU",
             "damaged": "DMG", "missing": "—"}
LEGEND = {"released": "released (age; * engine check still pending on its GPU)",
          "pending": "published, waiting for its engine check on its GPU or, in candidate, for promotion",
          "stale": "an older build is released",
          "failed": "the build failed", "refused": "released, but serving hosts refuse it",
          "damaged": "an object of its state is damaged", "missing": "nothing released"}


def _n(count: int, noun: str) -> str:
    """``1 model``, ``2 models``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cell_text(c: TargetStatus) -> str:
    """A matrix cell: ``ok 3d`` (``*``: engine pending), ``pend``, ``stale``, ``FAIL`` or ``—``."""
    if c.state == "released":
        return f"ok {age_text(c.age_s)}" + ("*" if c.engine == "pending" else "")
    return CELL_TEXT[c.state]


def _title(c: TargetStatus) -> str:
    facts = [c.state, c.reason, c.released_at and f"released {c.released_at}", c.since and f"since {c.since}",
             c.precision, c.engine and f"engine {c.engine}", c.signed, c.manifest]
    return plain_text(" · ".join(f for f in facts if f))


def _page(title: str, body: list[str]) -> str:
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
                      f"<h1>{escape(title)}</h1>", *body, "</body></html>", ""])


def _list(items: list[str], none: str) -> str:
    if not items:
        return f"<p>{escape(none)}</p>"
    return "<ul>" + "".join(f"<li>{html_text(i)}</li>" for i in items) + "</ul>"


def status_html(status: FleetStatus) -> str:
    """The matrix as one page: a row per model, a column per target, each cell coloured by its state."""
    counts = ", ".join(f"{n} {s}" for s, n in status.counts().items() if n) or "no targets"
    head = "".join(f'<th class="t" scope="col">{escape(t)}</th>' for t in status.targets)
    rows = []
    for model in status.models:
        cells = []
        for target in status.targets:
            c = status.cell(model, target)
            if c is None:
                cells.append(f'<td class="c none" data-target="{escape(target)}" title="not a target of this '
                             'model (farm.yaml)">·</td>')
            else:
                cells.append(f'<td class="c {c.state}" data-target="{escape(target)}" data-state="{c.state}" '
                             f'title="{escape(_title(c))}">{escape(cell_text(c))}</td>')
        rows.append(f'<tr data-model="{escape(model)}"><th scope="row">{escape(model)}</th>{"".join(cells)}</tr>')
    legend = "".join(f'<span class="{s}">{escape(CELL_TEXT[s])}</span>{escape(LEGEND[s])} ' for s in STATES) + \
        '<span class="none">·</span>not a target of the model (its farm.yaml)'

    details = []
    for state in ("failed", "refused", "damaged", "stale", "pending", "missing"):
        items = [f"{c.model} / {c.target}: {c.reason}" + (f" (since {c.since})" if c.since else "")
                 for c in status.cells if c.state == state and c.reason != NOTHING_RELEASED]
        details += [f'<h2 id="{state}">{state.capitalize()}{" (with a reason)" if state == "missing" else ""}: '
                    f'{len(items)}</h2>', _list(items, "None.")]
    problems = [f'<h2 id="problems">Skipped objects: {len(status.problems)}</h2>', _list(status.problems, "None.")] \
        if status.problems else []
    return _page("trtfarm fleet status", [
        f'<p class="meta">Generated {escape(status.generated_at)} · store <code>{escape(status.store)}</code> · '
        f"{_n(len(status.models), 'model')} x {_n(len(status.targets), 'target')} · {escape(counts)}</p>",
        f'<p class="legend">{legend}</p>',
        f'<table id="matrix"><thead><tr><th scope="col">model</th>{head}</tr></thead><tbody>',
        *rows, "</tbody></table>", *details, *problems])


def store_status_page(store: Store, page: str, attempts: int = 5) -> str:
    """Replace ``status/status.html`` in the store with ``page`` (compare-and-swap); returns its URL.

    Two nightly runs that finish together each write a whole page; the later swap wins, neither leaves half of one.
    """
    key, data = layout_shared.status_page_key(), page.encode()
    for _ in range(attempts):
        try:
            store.compare_and_swap(key, data, store.etag(key))
            return store.url(key)
        except Conflict:
            continue
    raise Conflict(f"{store.url(key)}: {attempts} concurrent writers in a row; the next nightly run writes it")


def status_markdown(status: FleetStatus, page: str, link: str | None, max_models: int = 200) -> str:
    """The matrix as markdown for a Prefect artifact (models beyond ``max_models`` are on the page only)."""
    counts = ", ".join(f"{n} {s}" for s, n in status.counts().items() if n) or "nothing"
    where = f"[status.html]({link})" if link else f"`{page}`"
    size = f"{_n(len(status.models), 'model')} x {_n(len(status.targets), 'target')}"
    lines = ["# trtfarm fleet status", "", f"{size}: {counts}. "
             f"The whole page: {where}.", "",
             "| model | " + " | ".join(status.targets) + " |", "|---|" + "---|" * len(status.targets)]
    for model in status.models[:max_models]:
        cells = [status.cell(model, t) for t in status.targets]
        lines.append(f"| {model} | " + " | ".join(
            ("**FAIL**" if c.state == "failed" else cell_text(c)) if c else "·" for c in cells) + " |")
    if len(status.models) > max_models:
        lines.append(f"\n_{len(status.models) - max_models} more models on the page._")
    failed = [c for c in status.cells if c.state == "failed"]
    if failed:
        lines += ["", f"**Failed: {len(failed)}**", *(f"- {c.model} / {c.target}: {c.reason} (since {c.since})"
                                                     for c in failed[:100])]
    lines += ["", "ok AGE: released (* engine check pending), pend: waiting for its GPU's engine check, stale: an "
              "older build is released, FAIL: failed, —: nothing released, ·: not a target of the model"]
    return "\n".join(lines) + "\n"


def pool_chart(decisions: FleetDecisions, out: Path) -> Path | None:
    """A bar chart of estimated GPU-minutes per work pool (``gpu_minutes.png`` in ``out``).

    None with no builds, or without matplotlib (the page then says which extra draws it).
    """
    per = decisions.pool_seconds()
    if not per or not charts_available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pools = list(per)[::-1]
    top = max(per.values())
    unit, size = ("s", 1) if top < 120 else ("min", 60) if top < 7200 else ("h", 3600)
    fig, ax = plt.subplots(figsize=(7, max(1.6, 0.45 * len(pools) + 0.8)))
    ax.barh(pools, [per[p] / size for p in pools], color="tab:blue")
    ax.set_xlabel(f"estimated GPU time of the builds ({unit})")
    for i, p in enumerate(pools):
        ax.text(per[p] / size, i, f" {per[p] / size:.1f}", va="center")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_minutes.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plan_html(title: str, decisions: FleetDecisions, chart: Path | None) -> str:
    """The what-if as one page: totals, the GPU-minutes chart, each change with its reasons and estimate."""
    counts = ", ".join(f"{n} {a}" for a, n in decisions.counts().items() if n) or "nothing"
    total = sum(decisions.pool_seconds().values())
    rows = [f'<tr class="{d.action}" data-model="{escape(d.model)}" data-target="{escape(d.target)}">'
            f"<td>{escape(d.model)}</td><td>{escape(d.target)}</td><td>{d.action}</td>"
            f'<td class="num">{"shared" if d.basis_kind == "shared" else duration_text(d.estimate_s)}</td>'
            f"<td>{escape(d.pool or '')}</td><td>{html_text('; '.join(d.reasons))}</td>"
            f"<td>{html_text(d.basis)}</td></tr>"
            for d in decisions.changed()]
    pools = "".join(f'<tr><td>{escape(p)}</td><td class="num">{duration_text(s)}</td></tr>'
                    for p, s in decisions.pool_seconds().items())
    figure = (f'<figure><img alt="gpu_minutes" src="{data_uri(chart)}"></figure>' if chart else
              f"<p>{escape(NO_CHARTS)}</p>" if decisions.pool_seconds() else "<p>No build to estimate.</p>")
    kept = decisions.kept()
    keep = [f"{t}: keeps its plan for {k} of {n} models" + (f"; unchanged, not built yet for {u}" if u else "")
            for t, (k, u, n) in kept.items() if k or u]
    triton = [f"{m}: {', '.join(ts)}" for m, ts in decisions.triton.items()]
    return _page(title, [
        f'<p class="meta">{escape(counts)} · estimated {duration_text(total)} of GPU time'
        + (f" ({decisions.unestimated()} build(s) without an estimate)" if decisions.unestimated() else "") + "</p>",
        '<h2 id="pools">GPU time per work pool</h2>', figure,
        f'<table id="pool-table"><thead><tr><th>pool</th><th>GPU time</th></tr></thead><tbody>{pools}</tbody></table>',
        f'<h2 id="changes">Changes: {len(rows)}</h2>',
        '<table id="decisions"><thead><tr><th>model</th><th>target</th><th>action</th><th>estimate</th><th>pool</th>'
        "<th>what changes</th><th>basis of the estimate</th></tr></thead><tbody>", *rows, "</tbody></table>",
        f'<h2 id="keep">Targets the change leaves as they are: {len(keep)}</h2>', _list(keep, "None."),
        *([f'<h2 id="refused">Models a run would refuse: {len(decisions.refused)}</h2>',
           _list(decisions.refused, "None.")] if decisions.refused else []),
        f'<h2 id="serving">Serving images: {len(decisions.serving)}</h2>', _list(decisions.serving, "No change."),
        f'<h2 id="triton">Triton repositories that change: {len(triton)}</h2>', _list(triton, "None.")])
