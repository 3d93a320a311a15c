"""``report MODEL`` names each plan's precision (issue 59): a model's latest plans may mix recipes.

An int8 trial build of one target after an fp16 build of both left the report with an int8 row beside an fp16 row
and nothing to tell them apart. Each row now carries its plan's recipe: in report.md, report.html and ``--json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trtfarm import layout
from trtfarm.publishing.publish import publish_plan
from trtfarm.reports.report import write_report
from trtfarm.reports.stored_outcomes import outcomes_for
from trtfarm.store import open_store
from trtfarm.vocabulary.target_outcome import TargetOutcome

from .test_manifest import sample


def publish(store, tmp_path, target: str, gpu: str, recipe: str, created_at: str) -> str:
    """A plan of model ``enc`` for ``target`` built with ``recipe``; its manifest's key."""
    plan = tmp_path / f"{target}-{recipe}.plan"
    plan.write_bytes(b"ftrt" + recipe.encode() * 500)
    digest = f"{recipe}-{target}".encode().hex().ljust(64, "0")[:64]
    prefix = layout.plan_prefix("enc", "a" * 64, gpu, "tensorrt_rtx-1.7.1.116", digest)

    def manifest_for(info):
        m = sample()
        m.target.target_id, m.target.gpu, m.plan, m.created_at = target, gpu, info, created_at
        m.precision.recipe = recipe
        return m

    return publish_plan(store, prefix, plan, manifest_for).manifest_key


def mixed_store(tmp_path):
    """fp16 for both targets, then an int8 trial of one: the latest plans are one int8 and one fp16."""
    store = open_store((tmp_path / "store").as_uri())
    publish(store, tmp_path, "rtx-4090-rtx1.7", "rtx-4090", "fp16", "2026-01-01T00:00:00+00:00")
    publish(store, tmp_path, "rtx-5090-rtx1.7", "rtx-5090", "fp16", "2026-01-01T00:00:00+00:00")
    publish(store, tmp_path, "rtx-4090-rtx1.7", "rtx-4090", "int8", "2026-01-02T00:00:00+00:00")
    return store


def test_a_models_latest_plans_of_two_recipes_each_name_theirs(tmp_path):
    store = mixed_store(tmp_path)
    model, run, outcomes = outcomes_for(store, "enc")
    written = write_report(store, model, run, outcomes, tmp_path / "out")
    assert {r.target: r.precision for r in written.rows} == {"rtx-4090-rtx1.7": "int8", "rtx-5090-rtx1.7": "fp16"}
    md = written.path.read_text()
    assert "| target | status | engine | precision | accuracy |" in md
    assert "| rtx-4090-rtx1.7 | built | pending on NVIDIA H100 80GB HBM3 | int8 |" in md, md
    assert "| rtx-5090-rtx1.7 | built | pending on NVIDIA H100 80GB HBM3 | fp16 |" in md, md
    html = written.path.with_name("report.html").read_text()
    assert "<th>precision</th>" in html and "<td>int8</td>" in html and "<td>fp16</td>" in html
    rows = json.loads((tmp_path / "out/rows.json").read_text())
    assert [r["precision"] for r in rows] == ["int8", "fp16"]


def test_a_target_without_a_plan_shows_no_precision(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    written = write_report(store, "enc", "run-1", [TargetOutcome("l4-trt11.4", "failed", "parser refused")],
                           tmp_path / "out")
    assert written.rows[0].precision == "" and "| l4-trt11.4 | **failed** |  | – |" in written.path.read_text()


def test_report_json_names_each_rows_precision(tmp_path):
    store = mixed_store(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "report", "enc", "--store", store.uri, "--out",
                           str(tmp_path / "rep"), "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert {r["target"]: r["precision"] for r in json.loads(done.stdout)["rows"]} == \
        {"rtx-4090-rtx1.7": "int8", "rtx-5090-rtx1.7": "fp16"}


def test_the_terminal_table_names_each_rows_precision_at_80_columns(tmp_path):
    store = mixed_store(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))} | {"COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "report", "enc", "--store", store.uri, "--out",
                           str(tmp_path / "rep")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "precision" in " ".join(lines) and all(len(line) <= 80 for line in lines), done.stdout
    assert any("rtx-4090-rtx1.7" in line and "int8" in line for line in lines), done.stdout
    assert any("rtx-5090-rtx1.7" in line and "fp16" in line for line in lines), done.stdout
