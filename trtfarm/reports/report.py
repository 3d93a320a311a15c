"""Run reports: targets x status x accuracy x p50/p99 x memory x build time, and what changed since the last release.

Markdown with PNG charts beside it and one self-contained HTML page (``report.html``, charts inlined), written locally
and into the store (``reports/<model>/<run>/``); the farm's flow also posts the markdown as a Prefect artifact
(``tasks/report.py``). Figures come from manifests only: the one an outcome carries, else the one its key names. A
target whose engine check is pending shows ``pending on <GPU>``, never a number.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from trtfarm import layout
from trtfarm.publishing.publish import read_manifest
from trtfarm.reports.rows import ReportRow
from trtfarm.store import AlreadyExists, Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.target_outcome import TargetOutcome


def _accuracy(m: Manifest) -> str:
    from trtfarm.validation.summary import EngineFigures

    engine_cos = EngineFigures.of(m.verification.engine).min_cosine()
    if engine_cos is not None:
        return f"cos min {engine_cos:.5f} (engine)"
    gate = m.verification.onnx.figures
    cos = [f["cosine_min"] for f in gate.values()] if gate else []
    return f"cos min {min(cos):.5f} ({m.precision.recipe} gate)" if cos else m.precision.recipe


def row_for(store: Store, outcome: TargetOutcome) -> ReportRow:
    """A report row from one target's outcome and its manifest (read only when the outcome does not carry it)."""
    row = ReportRow(outcome.target, outcome.status, outcome.reason.splitlines()[0] if outcome.reason else "")
    row.manifest = outcome.manifest or ""
    m = outcome.published or (read_manifest(store, outcome.manifest_key) if outcome.manifest_key else None)
    if m is None:
        return row
    from trtfarm.validation.summary import EngineFigures  # a run that only stores its outcomes needs none of it

    engine = m.verification.engine
    figures = EngineFigures.of(engine)
    row.engine = f"pending on {m.target.gpu_name}" if engine.status == "pending" else engine.status
    latency = figures.latency.get("0")
    if latency:
        row.p50_ms, row.p99_ms = latency["p50"], latency["p99"]
    memory = m.plan.device_memory_per_profile
    row.memory_mib = max(memory) / 2**20 if memory else None
    row.build_s, row.plan_mib, row.accuracy = m.build.wall_s, m.plan.bytes / 2**20, _accuracy(m)
    row.precision = m.precision.recipe  # a model's latest plans may mix recipes (a trial build of one target)
    changes = [r.text for r in figures.regressions]
    row.regressions = [r.text for r in figures.regressions if r.regressed]
    if figures.tactic_changes is not None:
        row.tactic_changes = figures.tactic_changes.summary
        changes.append(row.tactic_changes)
    row.changes = "; ".join(changes) or ("first release" if engine.status == "passed" else "")
    row.regressed = any(r.regressed for r in figures.regressions)
    return row


def render_markdown(title: str, rows: list[ReportRow], charts: list[str], note: str = "") -> str:
    """The report as markdown: the table, flagged regressions, and the charts (or ``note`` on why there are none)."""
    def fmt(v, spec):
        return format(v, spec) if v is not None else "–"

    lines = [f"# {title}", "", f"Generated {datetime.now(timezone.utc).isoformat(timespec='seconds')}.", "",
             "| target | status | engine | precision | accuracy | p50 ms | p99 ms | memory MiB | build s | plan MiB | "
             "changes | manifest |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        status = f"**{r.status}**" if r.status == "failed" else r.status
        changes = ("⚠️ " if r.regressed else "") + (r.changes or r.reason)
        link = f"[manifest.json]({r.manifest})" if r.manifest else "–"
        lines.append(f"| {r.target} | {status} | {r.engine} | {r.precision or '–'} | {r.accuracy} | "
                     f"{fmt(r.p50_ms, '.3f')} | {fmt(r.p99_ms, '.3f')} | {fmt(r.memory_mib, '.1f')} | "
                     f"{fmt(r.build_s, '.2f')} | {fmt(r.plan_mib, '.2f')} | {changes} | {link} |")
    flagged = [r for r in rows if r.regressed]
    lines += ["", f"**Regressions: {len(flagged)}**" + ("".join(f"\n- {r.target}: {r.changes}" for r in flagged)
                                                        if flagged else " — none.")]
    lines += [""] + [f"![{Path(c).stem}]({Path(c).name})" for c in charts] + ([note] if note else [])
    return "\n".join(lines) + "\n"


def _save(fig, path: Path, charts: list[str]) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    charts.append(str(path))


NO_CHARTS = "Charts are not drawn here: matplotlib is not installed (pip install 'trtfarm[reports]' draws them)."


def charts_available() -> bool:
    """Whether matplotlib imports here: the ``[reports]`` extra, which ``[farm]`` does not bring."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # set to None in sys.modules: not importable
        return False


def render_charts(rows: list[ReportRow], out: Path) -> list[str]:
    """PNG bar charts: p50/p99 per target (where measured), build time and plan size per target (where built).

    None without matplotlib (the report then says which extra draws them): a run never fails for its charts.
    """
    if not charts_available():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    charts: list[str] = []
    timed = [r for r in rows if r.p50_ms is not None]
    if timed:
        fig, ax = plt.subplots(figsize=(max(4, len(timed) * 1.2), 3))
        xs = range(len(timed))
        ax.bar([x - 0.2 for x in xs], [r.p50_ms for r in timed], 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], [r.p99_ms for r in timed], 0.4, label="p99",
               color=["tab:red" if r.regressed else "tab:orange" for r in timed])
        ax.set_xticks(list(xs), [r.target for r in timed], rotation=20, ha="right")
        ax.set_ylabel("latency (ms)")
        ax.legend()
        _save(fig, out / "latency.png", charts)
        plt.close(fig)
    for name, label, color, attr in (("build_time", "build time (s)", "tab:blue", "build_s"),
                                     ("plan_size", "plan size (MiB)", "tab:green", "plan_mib")):
        built = [r for r in rows if getattr(r, attr) is not None]
        if not built:
            continue
        fig, ax = plt.subplots(figsize=(max(4, len(built) * 1.2), 3))
        ax.bar([r.target for r in built], [getattr(r, attr) for r in built], color=color)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=20)
        _save(fig, out / f"{name}.png", charts)
        plt.close(fig)
    return charts


@dataclass(frozen=True)
class WrittenReport:
    """A rendered report: where its ``report.md`` is, its rows, and why it has no charts (empty when it has)."""

    path: Path
    rows: list[ReportRow]
    note: str = ""


def outcomes_json(outcomes: list[TargetOutcome]) -> bytes:
    """A run's outcomes of one model as stored (``outcomes.json``)."""
    return json.dumps([o.to_record() for o in outcomes], indent=2).encode()


def write_report(store: Store, model: str, run: str, outcomes: list[TargetOutcome], out: Path) -> WrittenReport:
    """Render the run's report into ``out`` and copy it into the store under ``reports/<model>/<run>/``.

    ``out`` gets ``report.md`` with its PNG charts beside it, ``report.html`` (self-contained: opens from disk or from
    the store in any browser), ``outcomes.json`` and ``rows.json``.
    """
    from trtfarm.reports.html import render_html  # a run's outcomes alone (a local build's) need no page

    rows = [row_for(store, o) for o in outcomes]
    out.mkdir(parents=True, exist_ok=True)
    charts = render_charts(rows, out)
    note = "" if charts_available() else NO_CHARTS
    title = f"trtfarm report: {model}, run {run}"
    path = out / "report.md"
    path.write_text(render_markdown(title, rows, charts, note))
    (out / "report.html").write_text(render_html(title, rows, [Path(c) for c in charts], store.uri, note))
    (out / "outcomes.json").write_bytes(outcomes_json(outcomes))
    (out / "rows.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    for f in [path, out / "report.html", out / "outcomes.json", out / "rows.json", *map(Path, charts)]:
        try:
            store.upload_file(layout.report_key(model, run, f.name), f)
        except AlreadyExists:  # this run's report was stored before (a rerun of its flow): the first copy stays
            continue
    return WrittenReport(path, rows, note)
