"""Report a run as Prefect artifacts: the run's table, and each model's report with its charts inline.

A model's markdown report is posted with its charts inlined as ``data:image/png`` URIs (``artifact_markdown``): the
Prefect UI cannot reach the store, and both of its markdown renderers show ``data:image/`` sources in ``<img>``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from trtfarm import layout
from trtfarm.pipeline import store_reports
from trtfarm.reports.html import data_uri
from trtfarm.store import Store
from trtfarm.vocabulary.target_outcome import LostChild, RunRow

# The self-hosted API (3.9.1) sets no bound on an artifact's data, but the row is read whole by every artifact view:
# keep a report artifact well under a megabyte. Three 100-dpi bar charts inline in about 50 KB.
ARTIFACT_BUDGET = 512 * 1024
LOST_ARTIFACT = "build-matrix-lost-hosts"  # the children a run lost to their hosts; `farm run --wait` prints it
SHARE_S = 7 * 24 * 3600  # how long a link to a chart left out of an artifact stays valid


def _stored_chart(store: Store, key: str) -> str:
    """Where a chart left out of the artifact can be seen: a link to it (S3), or a sentence naming the file."""
    link = store.share_url(key, SHARE_S)
    if link:
        return f"[{Path(key).name} (link valid {SHARE_S // 86400} days)]({link})"
    return (f"`{Path(key).name}` is in the store at `{store.url(key)}` (a file store the Prefect UI cannot reach; "
            f"`trtfarm report` renders it with its charts)")


def artifact_markdown(store: Store, model: str, run: str, report_md: Path, budget: int = ARTIFACT_BUDGET) -> str:
    """The report as a Prefect markdown artifact: each chart inlined as a data URI while the text stays in ``budget``.

    A chart that would not fit is replaced by a link to its copy in an S3 store, or by a sentence naming its copy in
    a file store.
    """
    text = report_md.read_text()
    for png in sorted(report_md.parent.glob("*.png"), key=lambda p: text.find(f"]({p.name})")):
        ref = f"]({png.name})"
        if ref not in text:
            continue
        uri = data_uri(png)
        if len(text) + len(uri) <= budget:
            text = text.replace(ref, f"]({uri})")
        else:
            text = text.replace(f"![{png.stem}]({png.name})",
                                f"_chart {png.stem} left out of this artifact (over {budget // 1024} KiB):_ "
                                + _stored_chart(store, layout.report_key(model, run, png.name)))
    return text


def _artifact_key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())


@task(cache_policy=NO_CACHE)
def report_run(rows: list[RunRow], store: Store, lost: list[LostChild] | None = None) -> None:
    """The run's reports in the store (``store_reports``) and as Prefect artifacts.

    Each model this run built or failed something for gets its full report as a markdown artifact, charts inline
    (data URIs) so the Prefect UI shows them; the run gets one table: model x target x status x build time x plan
    size x verification x manifest; and, when children were lost to their hosts, a table of them
    (``flows.dispatch.lost_rows``: where each ran, why it was lost, where it was resubmitted, how that ended).
    """
    if lost:
        create_table_artifact([r.to_json() for r in lost], key=LOST_ARTIFACT,
                              description=f"{len(lost)} child run(s) lost to their host and resubmitted")
    run = str(flow_run.get_id() or "local")
    with tempfile.TemporaryDirectory(prefix="trtfarm-report-") as out:
        for model, report_md in store_reports(store, run, rows, Path(out)).items():
            if report_md is not None:
                create_markdown_artifact(artifact_markdown(store, model, run, report_md),
                                         key=_artifact_key(f"build-matrix-{model}-report"),
                                         description=f"trtfarm report for {model}")
    table = [{"model": r.model, "target": o.target, "status": o.status, "reason": o.reason, "build_s": o.build_s,
              "plan_MiB": round(o.plan_bytes / 2**20, 2) if o.plan_bytes else None,
              "verification": ", ".join(f"{k}={v}" for k, v in o.verification.items()),
              "manifest": o.manifest or ""} for r in rows for o in [r.outcome]]
    counts = {s: sum(r.outcome.status == s for r in rows) for s in ("built", "up-to-date", "skipped", "failed")}
    create_table_artifact(table, key="build-matrix", description="trtfarm build matrix: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n))
