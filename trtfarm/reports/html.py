"""A run's report as one self-contained HTML page: charts inlined as data URIs, no script, no network.

It opens from disk (``trtfarm report``'s folder) or from the store in any browser, and says the same as ``report.md``:
the targets table, flagged regressions, tactic changes, engine checks still pending, and the charts.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from trtfarm.errors import html_text
from trtfarm.reports.rows import ReportRow

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem;color:#1f2328;max-width:1400px}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:1.8rem}
.meta{color:#59636e;font-size:.9rem}
table{border-collapse:collapse;font-size:.88rem;width:100%}
th,td{border:1px solid #d1d9e0;padding:.35rem .55rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.failed td{background:#fff1f0}tr.regressed td{background:#fff8e1}
.status-failed{color:#cf222e;font-weight:600}.status-built{color:#1a7f37}
.charts{display:flex;flex-wrap:wrap;gap:1.5rem}figure{margin:0}figcaption{color:#59636e;font-size:.85rem}
ul{padding-left:1.4rem}
"""

_COLUMNS = ("target", "status", "engine", "precision", "accuracy", "p50 ms", "p99 ms", "memory MiB", "build s",
            "plan MiB", "changes", "manifest")


def data_uri(png: Path) -> str:
    """A ``data:image/png;base64,`` URI of a PNG file."""
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()


def _num(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "–"


def _row(r: ReportRow) -> str:
    classes = " ".join(c for c, on in (("failed", r.status == "failed"), ("regressed", r.regressed)) if on)
    changes = ("⚠️ " if r.regressed else "") + (r.changes or r.reason)
    link = f'<a href="{escape(r.manifest)}">manifest.json</a>' if r.manifest else "–"
    cells = [f"<td>{escape(r.target)}</td>", f'<td class="status-{escape(r.status)}">{escape(r.status)}</td>',
             f"<td>{escape(r.engine)}</td>", f"<td>{escape(r.precision or '–')}</td>", f"<td>{escape(r.accuracy)}</td>",
             *(f'<td class="num">{_num(v, spec)}</td>' for v, spec in (
                 (r.p50_ms, ".3f"), (r.p99_ms, ".3f"), (r.memory_mib, ".1f"), (r.build_s, ".2f"), (r.plan_mib, ".2f"))),
             f"<td>{escape(changes)}</td>", f"<td>{link}</td>"]
    return f'<tr class="{classes}" data-target="{escape(r.target)}">{"".join(cells)}</tr>'


def _items(items: list[str], none: str) -> str:
    if not items:
        return f"<p>{escape(none)}</p>"
    return "<ul>" + "".join(f"<li>{html_text(i)}</li>" for i in items) + "</ul>"


def _charts(charts: list[Path], note: str = "") -> str:
    if not charts:
        return f"<p>{escape(note or 'No chart: no target of this run was built or timed.')}</p>"
    figures = [f'<figure><img alt="{escape(c.stem)}" src="{data_uri(c)}">'
               f'<figcaption>{escape(c.stem.replace("_", " "))} per target</figcaption></figure>' for c in charts]
    return f'<div class="charts">{"".join(figures)}</div>'


def render_html(title: str, rows: list[ReportRow], charts: list[Path], store_uri: str = "", note: str = "") -> str:
    """The report as one HTML page, every chart inlined (``<img src="data:image/png;base64,...">``)."""
    counts = {s: sum(r.status == s for r in rows) for s in dict.fromkeys(r.status for r in rows)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no targets"
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    regressions = [f"{r.target}: {text}" for r in rows for text in (r.regressions or ([r.changes] if r.regressed
                                                                                      else []))]
    tactics = [f"{r.target}: {r.tactic_changes}" for r in rows if r.tactic_changes]
    pending = [f"{r.target}: engine check {r.engine} (runs when a worker with that GPU validates the plan)"
               for r in rows if r.engine.startswith("pending")]
    store = f" · store <code>{escape(store_uri)}</code>" if store_uri else ""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>", f'<p class="meta">Generated {generated} · {escape(summary)}{store}</p>',
        '<h2>Targets</h2><table id="targets"><thead><tr>' + "".join(f"<th>{c}</th>" for c in _COLUMNS)
        + "</tr></thead><tbody>", *(_row(r) for r in rows), "</tbody></table>",
        f'<h2 id="regressions">Regressions: {len(regressions)}</h2>', _items(regressions, "None."),
        f'<h2 id="tactics">Tactic changes: {len(tactics)}</h2>', _items(tactics, "None since the last release."),
        f'<h2 id="pending">Pending checks: {len(pending)}</h2>', _items(pending, "None: every check ran."),
        '<h2 id="charts">Charts</h2>', _charts(charts, note), "</body></html>", ""])
