"""Reports render for built, failed, skipped and pending targets, and show what changed since the last release."""

from __future__ import annotations

import base64
import re
import urllib.request

import pytest

from tasks.report import ARTIFACT_BUDGET, artifact_markdown
from trtfarm.publishing.publish import publish_plan
from trtfarm.reports.report import write_report
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import Check
from trtfarm.vocabulary.target_outcome import TargetOutcome

from ..conftest import REPO
from ..test_manifest import sample


def publish(store, prefix, target, tmp_path, engine: Check, build_s=1.5):
    plan = tmp_path / f"{target}.plan"
    plan.write_bytes(b"ftrt" + b"\0" * 2000)

    def manifest_for(info):
        m = sample()
        m.target.target_id, m.plan, m.build.wall_s = target, info, build_s
        m.verification.engine = engine
        return m

    return publish_plan(store, prefix, plan, manifest_for).manifest_key


def built(store, key: str, target: str) -> TargetOutcome:
    """A built target's outcome as a run records it: its manifest's URL and key (the report reads the manifest)."""
    return TargetOutcome(target, "built", "", store.url(key), manifest_key=key)


def every_status_outcomes(store, tmp_path) -> list[TargetOutcome]:
    """Built (validated, with a regression and tactic changes), built (engine pending), failed and skipped."""
    validated = Check(status="failed", detail="validated on NVIDIA H100 80GB HBM3: p99 regression", figures={
        "latency": {"0": {"p50": 1.9, "p99": 2.6}}, "accuracy": [{"profile": 0, "point": "opt", "shapes": {},
                                                                 "outputs": {"embeddings": {"cosine_min": 0.99991}}}],
        "regressions": [{"profile": "0", "text": "p99 2.100 -> 2.600 ms (+23.8%, limit +5%) REGRESSION",
                         "regressed": True}],
        "tactic_changes": {"summary": "1 tactic(s) changed, 1 layer(s) fused away"}})
    pending = Check(status="pending", detail="engine: pending on NVIDIA GeForce RTX 4090")
    return [
        built(store, publish(store, "plans/a", "h100-trt11.4", tmp_path, validated), "h100-trt11.4"),
        built(store, publish(store, "plans/b", "rtx-4090-rtx1.7", tmp_path, pending, 0.4), "rtx-4090-rtx1.7"),
        TargetOutcome("l4-trt11.4", "failed", "the ONNX parser rejected the model\nmore"),
        TargetOutcome("h100-trt10.16", "skipped", "`tensorrt` is not importable here"),
    ]


def test_report_with_every_status_and_a_flagged_regression(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    outcomes = every_status_outcomes(store, tmp_path)
    path = write_report(store, "encoder", "run-1", outcomes, tmp_path / "out").path
    md = path.read_text()
    for text in ("| h100-trt11.4 | built | failed | fp32 | cos min 0.99991 (engine) | 1.900 | 2.600 |",
                 "⚠️ p99 2.100 -> 2.600 ms (+23.8%, limit +5%) REGRESSION; 1 tactic(s) changed",
                 "| rtx-4090-rtx1.7 | built | pending on NVIDIA H100 80GB HBM3", "| l4-trt11.4 | **failed** |",
                 "the ONNX parser rejected the model |", "| h100-trt10.16 | skipped |", "**Regressions: 1**",
                 "![latency](latency.png)", "![build_time](build_time.png)"):
        assert text in md, (text, md)
    for png in ("latency.png", "build_time.png", "plan_size.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert store.get(f"reports/encoder/run-1/{png}") is not None
    assert store.get("reports/encoder/run-1/report.md").data.decode() == md


def test_the_html_report_is_one_page_with_every_chart_inline_and_every_section(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    path = write_report(store, "encoder", "run-1", every_status_outcomes(store, tmp_path), tmp_path / "out").path
    html = path.with_name("report.html").read_text()
    assert store.get("reports/encoder/run-1/report.html").data.decode() == html
    sources = re.findall(r'<img alt="(\w+)" src="([^"]+)"', html)
    assert [alt for alt, _ in sources] == ["latency", "build_time", "plan_size"]
    for alt, src in sources:  # inline, byte for byte the chart beside report.md: nothing to fetch
        assert base64.b64decode(src.removeprefix("data:image/png;base64,")) == (path.parent / f"{alt}.png").read_bytes()
    assert "http" not in html.replace(store.uri, "") and "<script" not in html
    assert re.findall(r'data-target="([^"]+)"', html) == ["h100-trt11.4", "rtx-4090-rtx1.7", "l4-trt11.4",
                                                         "h100-trt10.16"]
    for text in ('<tr class="regressed" data-target="h100-trt11.4">', "Regressions: 1</h2>",
                 "<li>h100-trt11.4: p99 2.100 -&gt; 2.600 ms (+23.8%, limit +5%) REGRESSION</li>",
                 "<li>h100-trt11.4: 1 tactic(s) changed, 1 layer(s) fused away</li>", "Pending checks: 1</h2>",
                 '<tr class="failed" data-target="l4-trt11.4">', "`tensorrt` is not importable here"):
        assert text in html, text


def test_the_artifact_inlines_every_chart_within_its_budget(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    path = write_report(store, "encoder", "run-1", every_status_outcomes(store, tmp_path), tmp_path / "out").path
    md = artifact_markdown(store, "encoder", "run-1", path)
    inlined = re.findall(r"!\[(\w+)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md)
    assert [name for name, _ in inlined] == ["latency", "build_time", "plan_size"]
    assert base64.b64decode(inlined[0][1]) == (path.parent / "latency.png").read_bytes()
    assert len(md) < ARTIFACT_BUDGET
    # only the image sources changed: the table and the regressions read as in report.md
    assert re.sub(r"!\[(\w+)\]\(data:[^)]+\)", r"![\1](\1.png)", md) == path.read_text()


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_charts_over_the_budget_point_to_the_store(kind, tmp_path, request):
    uri = (tmp_path / "store").as_uri() if kind == "file" else request.getfixturevalue("s3_uri")
    store = open_store(uri)
    path = write_report(store, "encoder", "run-1", every_status_outcomes(store, tmp_path), tmp_path / "out").path
    budget = len(path.read_text()) + len(base64.b64encode((path.parent / "latency.png").read_bytes())) + 100
    md = artifact_markdown(store, "encoder", "run-1", path, budget=budget)
    assert "![latency](data:image/png;base64," in md and "data:image" not in md.split("![latency]")[0]
    assert md.count("data:image/png") == 1 and md.count("left out of this artifact") == 2
    if kind == "file":
        assert f"`plan_size.png` is in the store at `{store.url('reports/encoder/run-1/plan_size.png')}`" in md
    else:  # a presigned link that a browser can open without credentials
        link = re.search(r"\[build_time.png \(link valid 7 days\)\]\((http[^)]+)\)", md).group(1)
        with urllib.request.urlopen(link, timeout=10) as r:
            assert r.read() == (path.parent / "build_time.png").read_bytes()


def test_without_matplotlib_the_report_is_written_without_charts_and_names_the_extra(tmp_path):
    """A farm control worker has [farm], which does not bring matplotlib: its run's report must not fail the run
    (it did: `ModuleNotFoundError: No module named 'matplotlib'` after the plans were published)."""
    import subprocess
    import sys

    script = f"""
import sys
sys.modules["matplotlib"] = None  # as in an install without the [reports] extra
from tests.validate.test_report import every_status_outcomes
from trtfarm.reports.report import write_report
from trtfarm.store import open_store
from pathlib import Path
tmp = Path({str(tmp_path)!r})
store = open_store((tmp / "store").as_uri())
written = write_report(store, "encoder", "run-1", every_status_outcomes(store, tmp), tmp / "out")
print(written.note)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pip install 'trtfarm[reports]'" in done.stdout
    md = (tmp_path / "out/report.md").read_text()
    assert "pip install 'trtfarm[reports]'" in md and ".png" not in md and "rtx-4090-rtx1.7" in md
    assert "pip install &#x27;trtfarm[reports]&#x27;" in (tmp_path / "out/report.html").read_text()
    assert not list((tmp_path / "out").glob("*.png"))
