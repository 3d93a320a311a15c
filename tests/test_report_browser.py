"""Reports seen in a real browser: the Prefect UI's artifact page of a finished build-matrix run, and report.html.

Given a real ``prefect server start`` with its UI on 127.0.0.1 and a build-matrix run (real RTX builds, in this
process, dispatch local) against it, headless Chromium opens the run's report artifact in both Prefect UIs (V2, the
default, under /v2/; V1 at the root) and the HTML page ``trtfarm report`` writes, and every chart must be a loaded image
with a non-zero natural size and the table must name every target. Screenshots go to the test's folder; with
TRTFARM_UPDATE_SCREENSHOTS=1 the V2 one also replaces docs/images/ for docs/serving.md (a test run leaves the tree
as it is).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tasks.report import ARTIFACT_BUDGET
from trtfarm.reports.report import write_report
from trtfarm.store import open_store

from .browser import images, table_cells
from .conftest import RTX_FLEET
from .farm_server import REPO, Farm, flush_prefect_services
from .validate.test_report import every_status_outcomes

pytestmark = pytest.mark.integration

README_SCREENSHOT = REPO / "docs/images/report-prefect-ui.png"


@pytest.fixture(scope="module")
def ui_farm(tmp_path_factory):
    farm = Farm(tmp_path_factory.mktemp("ui-farm"), {}, ui=True)
    try:
        farm.start_server(timeout=180)
        yield farm
    finally:
        farm.stop()


@pytest.fixture(scope="module")
def finished_run(ui_farm, example_onnx, tmp_path_factory):
    """A build-matrix run that finished on the UI farm's server: (run id, store URI, targets, report artifact)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.build_matrix import build_matrix
    from trtfarm.planning.requests import MatrixRequest

    home = tmp_path_factory.mktemp("run")
    (home / "gpu_targets.yaml").write_text(RTX_FLEET)
    store = (home / "store").as_uri()
    request = MatrixRequest(model=str(example_onnx), store=store, targets_file=str(home / "gpu_targets.yaml"),
                            dispatch="local")
    with temporary_settings({PREFECT_API_URL: ui_farm.api}):
        rows = asyncio.run(build_matrix(request))
        flush_prefect_services()  # the run's events reach the server before it stops
    run = next(k.split("/")[2] for k in open_store(store).list("reports/encoder/") if k.endswith("/report.md"))
    query = {"flow_runs": {"id": {"any_": [run]}}, "artifacts": {"key": {"any_": ["build-matrix-encoder-report"]}}}
    post = urllib.request.Request(f"{ui_farm.api}/artifacts/filter", data=json.dumps(query).encode(),
                                  headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(post, timeout=30) as r:
        (artifact,) = json.loads(r.read())
    return run, store, [r.outcome.target for r in rows], artifact


def charts_of(store: str, run: str) -> list[str]:
    return sorted(Path(k).stem for k in open_store(store).list(f"reports/encoder/{run}/") if k.endswith(".png"))


@pytest.mark.parametrize("ui", ["v2", "v1"])
def test_the_prefect_ui_shows_the_reports_charts_and_every_target(ui, chromium, ui_farm, finished_run, tmp_path):
    run, store, targets, artifact = finished_run
    charts = charts_of(store, run)
    assert charts == ["build_time", "plan_size"]  # RTX builds here: timed and sized; latency waits for a GPU worker
    assert len(artifact["data"]) < ARTIFACT_BUDGET and artifact["data"].count("](data:image/png;base64,") == 2
    assert {"rtx-4090-rtx1.7", "rtx-5090-rtx1.7", "rtx3090-rtx1.7-o5", "h100-trt11.4"} <= set(targets)

    page = chromium.new_page()
    try:
        page.goto(f"{ui_farm.url}{'/v2' if ui == 'v2' else ''}/artifacts/artifact/{artifact['id']}")
        shown = images(page, charts)
        page.wait_for("[...document.querySelectorAll('table td')].length > 0")
        cells = table_cells(page)
        shot = page.screenshot(tmp_path / f"prefect-ui-{ui}.png")
    finally:
        page.close()
    assert sorted(i["alt"] for i in shown) == charts
    for image in shown:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
        assert image["src"].startswith("data:image/png;base64"), image
    assert [t for t in targets if t not in cells] == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if ui == "v2" and os.environ.get("TRTFARM_UPDATE_SCREENSHOTS"):  # docs/serving.md's picture, retaken on request
        README_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, README_SCREENSHOT)


def test_the_html_report_of_trtfarm_report_opens_from_disk_with_its_charts(chromium, finished_run, tmp_path):
    run, store, targets, _ = finished_run
    done = subprocess.run([sys.executable, "-m", "trtfarm", "report", run, "--store", store, "--out",
                           str(tmp_path / "out"), "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    html = Path(json.loads(done.stdout)["html"])
    assert html == tmp_path / "out" / "report.html"

    page = chromium.new_page()
    try:
        page.goto(html.as_uri())
        shown = images(page, charts_of(store, run))
        rows = page.evaluate("[...document.querySelectorAll('#targets tr[data-target]')].map(r => r.dataset.target)")
        pending = page.evaluate("document.getElementById('pending').innerText")
        page.screenshot(tmp_path / "report-html.png")
    finally:
        page.close()
    assert [i["alt"] for i in shown] == ["build_time", "plan_size"]
    assert all(i["complete"] and i["width"] > 0 and i["height"] > 0 for i in shown), shown
    assert rows == targets
    assert pending == "Pending checks: 3"  # three RTX plans wait for their engine check on their GPU
    assert (tmp_path / "report-html.png").stat().st_size > 20_000


def test_an_html_report_with_a_regression_shows_latency_and_the_regression(chromium, tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    path = write_report(store, "encoder", "run-1", every_status_outcomes(store, tmp_path), tmp_path / "out").path
    html = path.with_name("report.html")
    assert store.get("reports/encoder/run-1/report.html").data == html.read_bytes()

    page = chromium.new_page()
    try:
        page.goto(html.as_uri())
        shown = images(page, ["latency", "build_time", "plan_size"])
        regressed = page.evaluate("[...document.querySelectorAll('#targets tr.regressed')].map(r => r.dataset.target)")
        text = page.evaluate("document.body.innerText")
        page.screenshot(tmp_path / "report-regression.png")
    finally:
        page.close()
    assert all(i["complete"] and i["width"] > 0 for i in shown) and len(shown) == 3, shown
    assert regressed == ["h100-trt11.4"]
    for line in ("Regressions: 1", "h100-trt11.4: p99 2.100 -> 2.600 ms (+23.8%, limit +5%) REGRESSION",
                 "h100-trt11.4: 1 tactic(s) changed, 1 layer(s) fused away", "Pending checks: 1",
                 "rtx-4090-rtx1.7: engine check pending on NVIDIA H100 80GB HBM3"):
        assert line in text, (line, text)
