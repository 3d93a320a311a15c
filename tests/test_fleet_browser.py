"""The fleet pages in a real browser, and the nightly run that writes status.html and posts its artifact.

Headless Chromium opens ``status.html`` from disk (written by ``trtfarm status --html`` for a store built by the
suite, with a failed, a stale, a pending, a released and a missing target) and ``whatif.html`` (with its chart): every
model and target must be shown, each cell in its state. Then a nightly build-matrix run (every registered model,
dispatched in its process) on a real ``prefect server start`` writes ``status/status.html`` to the store and posts the
``fleet-status`` artifact, which the Prefect UI shows with every target. With TRTFARM_UPDATE_SCREENSHOTS=1 the status
page's screenshot replaces docs/images/status-html.png for the README.
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
import yaml

from trtfarm import layout_shared
from trtfarm.pipeline import run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import register_export
from trtfarm.store import open_store

from .browser import images, table_cells
from .farm_server import REPO, Farm, flush_prefect_services
from .fleet_store import built_store, encoder_export

pytestmark = pytest.mark.integration

README_SCREENSHOT = REPO / "docs/images/status-html.png"
MATRIX_JS = """(() => ({
  models: [...document.querySelectorAll('#matrix tbody tr')].map(r => r.dataset.model),
  targets: [...document.querySelectorAll('#matrix thead th.t')].map(th => th.innerText.trim()),
  cells: [...document.querySelectorAll('#matrix tbody td')].map(td => [td.closest('tr').dataset.model,
          td.dataset.target, td.dataset.state || 'none', td.innerText.trim(),
          getComputedStyle(td).backgroundColor])
}))()"""


@pytest.fixture(scope="module")
def stale_store(tmp_path_factory):
    """The suite's store, a third model built, and a new encoder export registered but not built.

    (work, store URI, fleet file): every state is there: released and pending (ranker), stale (encoder), failed
    (dedupe), missing (the H100 targets) and targets a model does not build (dedupe's farm.yaml).
    """
    work = tmp_path_factory.mktemp("fleet-browser")
    store = (work / "store").as_uri()
    fleet = built_store(work, store)
    register_export(open_store(store), encoder_export(work / "ranker", 5, "ranker"))
    run_local(MatrixRequest(model="ranker", store=store, targets_file=str(fleet), dispatch="local"), report="outcomes")
    register_export(open_store(store), encoder_export(work / "encoder-1", 1))
    return work, store, fleet


def _trtfarm(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_status_html_shows_every_model_and_target_in_its_state(chromium, stale_store, tmp_path):
    work, store, fleet = stale_store
    page_file = tmp_path / "status.html"
    rows = json.loads(_trtfarm("status", "--store", store, "--targets-file", str(fleet), "--json", "--html",
                               str(page_file), cwd=tmp_path).stdout)
    page = chromium.new_page()
    try:
        page.goto(page_file.as_uri())
        page.wait_for("document.querySelectorAll('#matrix tbody tr').length > 0")
        shown = page.evaluate(MATRIX_JS)
        failed_list = page.evaluate("document.getElementById('failed').nextElementSibling.innerText")
        shot = page.screenshot(tmp_path / "status-html.png")
    finally:
        page.close()
    targets = [t["id"] for t in yaml.safe_load(fleet.read_text())["targets"]]
    assert shown["models"] == ["dedupe", "encoder", "ranker"] and shown["targets"] == targets
    states = {(m, t): s for m, t, s, _, _ in shown["cells"]}
    assert states == {(r["model"], r["target"]): r["state"] for r in rows} | {
        ("dedupe", "rtx5090-rtx1.7"): "none", ("dedupe", "rtx3090-rtx1.7-o5"): "none"}
    assert set(states.values()) == {"released", "pending", "failed", "stale", "missing", "none"}
    colours = {s: bg for _, _, s, _, bg in shown["cells"]}
    assert len(set(colours.values())) == len(colours)  # each state its own colour
    assert "dedupe / rtx4090-rtx1.7" in failed_list and "UNSUPPORTED_NODE" in failed_list
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("TRTFARM_UPDATE_SCREENSHOTS"):
        README_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, README_SCREENSHOT)


def test_plan_html_shows_its_gpu_minutes_chart_and_every_change(chromium, stale_store, tmp_path):
    work, store, fleet = stale_store
    doc = yaml.safe_load(fleet.read_text())
    doc["toolchains"]["rtx-1.7"]["version"] = "1.7.2.1"
    doc["gpus"]["l40s"] = {"nvml_name": "NVIDIA L40S", "compute_capability": "8.9", "memory_gib": 48, "pool": "l40s"}
    doc["targets"].append({"id": "l40s-trt11.4", "gpu": "l40s", "toolchain": "trt-11.4"})
    (tmp_path / "proposed.yaml").write_text(yaml.safe_dump(doc))
    rows = json.loads(_trtfarm("whatif", "--fleet", str(tmp_path / "proposed.yaml"), "--store", store,
                               "--targets-file", str(fleet), "--json", "--html", str(tmp_path / "out"),
                               cwd=tmp_path).stdout)
    page = chromium.new_page()
    try:
        page.goto((tmp_path / "out" / "whatif.html").as_uri())
        shown = images(page, ["gpu_minutes"])
        changes = page.evaluate("[...document.querySelectorAll('#decisions tbody tr')].map(r => [r.dataset.model, "
                                "r.dataset.target, r.className])")
        pools = table_cells(page)
        page.screenshot(tmp_path / "plan-html.png")
    finally:
        page.close()
    assert len(shown) == 1 and shown[0]["complete"] and shown[0]["width"] > 0, shown
    assert changes == [[r["model"], r["target"], r["action"]] for r in rows if r["action"] != "keep"]
    assert ["encoder", "l40s-trt11.4", "new"] in changes and ["encoder", "rtx4090-rtx1.7", "rebuild"] in changes
    assert {"rtx-4090", "rtx-3090", "l40s"} <= set(pools)


def test_the_nightly_run_writes_status_html_and_the_prefect_ui_shows_its_artifact(chromium, stale_store,
                                                                                  tmp_path_factory):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.build_matrix import build_matrix

    work, store, fleet = stale_store
    farm = Farm(tmp_path_factory.mktemp("ui-farm"), {}, ui=True)
    try:
        farm.start_server(timeout=300)
        with temporary_settings({PREFECT_API_URL: farm.api}):
            rows = asyncio.run(build_matrix(MatrixRequest(store=store, targets_file=str(fleet), dispatch="local")))
            flush_prefect_services()  # the run's events reach the server before it stops
        assert {(r.model, r.outcome.status) for r in rows} >= {("encoder", "built"), ("dedupe", "failed")}
        page_html = open_store(store).get(layout_shared.status_page_key()).data.decode()
        assert 'data-model="encoder"' in page_html and 'data-model="dedupe"' in page_html
        post = urllib.request.Request(f"{farm.api}/artifacts/filter", data=json.dumps(
            {"artifacts": {"key": {"any_": ["fleet-status"]}}}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(post, timeout=30) as r:
            (artifact,) = json.loads(r.read())
        assert "| encoder |" in artifact["data"] and "status.html" in artifact["data"]
        targets = [t["id"] for t in yaml.safe_load(fleet.read_text())["targets"]]
        cells_js = "[...document.querySelectorAll('table th, table td')].map(c => c.innerText.trim())"
        page = chromium.new_page()
        try:
            page.goto(f"{farm.url}/v2/artifacts/artifact/{artifact['id']}")
            # the single-page app renders the markdown when its data arrives: wait for the matrix, then read it
            # the cells are read in the same evaluation that saw them complete (the app may re-render after)
            cells = page.wait_for(f"(() => {{ const c = {cells_js}; return {json.dumps(targets)}.every(t => "
                                  "c.includes(t)) && c.includes('ranker') ? c : null; })()")
            page.screenshot(tmp_path_factory.mktemp("shots") / "status-artifact.png")
        finally:
            page.close()
    finally:
        farm.stop()
    assert [t for t in targets if t not in cells] == [] and {"encoder", "dedupe", "ranker"} <= set(cells)
    assert "FAIL" in cells
