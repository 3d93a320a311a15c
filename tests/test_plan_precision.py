"""Planning reads only, for every recipe: the precision step is a job the executor runs before the builds.

fp16, int8 and auto-pin recipes are planned against a store that refuses every write (``WritesRefused``): the plan
is the step's ``PrecisionJob`` and no build yet. The job runs (``building.precision_runner.run_precision``, as the
executor calls it); planning again, still refusing writes, reuses the recorded step and plans the builds carrying
its result. The farm's planning runs without ModelOpt; ``trtfarm build`` of an fp16 recipe builds, then is up to
date; a refused gate exits as it always did, with nothing published.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trtfarm.building.precision_runner import run_precision
from trtfarm.pipeline import plan_run
from trtfarm.planning.requests import MatrixRequest
from trtfarm.run_setup import find_exports
from trtfarm.store import open_store

from .conftest import REPO
from .test_plan_decides import WritesRefused

BUILDABLE = {"rtx-4090-rtx1.7", "rtx-5090-rtx1.7", "rtx3090-rtx1.7-o5"}  # conftest's RTX_FLEET on this machine


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _recipe(case: str, export: Path, calib: Path) -> dict:
    """The request's fields for ``case``; auto-pin comes from the export's farm.yaml, as a model declares it."""
    if case == "auto-pin":
        (export / "farm.yaml").write_text("precision: {mode: fp16, auto_pin: true, task: embedding}\n"
                                          "profiles:\n  - input_ids: 1x16:16x128:32x512\n"
                                          "    attention_mask: 1x16:16x128:32x512\n")
        return {"release": True}
    if case == "int8":
        return {"precision": "int8", "calibration": str(calib)}
    return {"precision": "fp16"}


@pytest.mark.parametrize("case", ["fp16", "int8", "auto-pin"])
def test_planning_refuses_no_write_decides_the_step_then_reuses_its_record(case, example_dir, encoder_calib,
                                                                           fleet_file, tmp_path):
    export = tmp_path / "enc"
    export.mkdir()
    (export / "model.onnx").write_bytes((example_dir / "model.onnx").read_bytes())
    (export / "farm.yaml").write_text((example_dir / "farm.yaml").read_text())
    root = tmp_path / "store"
    request = MatrixRequest(model=str(export / "model.onnx"), store=str(root), targets_file=str(fleet_file),
                            **_recipe(case, export, encoder_calib))
    store = open_store(str(root))
    readonly = WritesRefused(store)
    [plan] = plan_run(request, readonly, find_exports(readonly, request.model), farm=False)
    job = plan.precision
    assert job is not None and plan.jobs == [] and plan.outcomes == {}, plan
    assert job.recipe.mode == ("int8" if case == "int8" else "fp16") and job.recipe.auto_pin == (case == "auto-pin")
    assert _files(root) == []  # planning wrote nothing, not even the store's folder
    [same] = plan_run(request, readonly, find_exports(readonly, request.model), farm=False)
    assert same.precision == job  # the step is keyed by its inputs: planned again, the same job

    run = run_precision(store, job)  # what the executor runs before the builds
    assert not run.failed and run.step.converted_key and run.step.gate == "passed", run
    written = _files(root)
    assert any(f.endswith("report.json") for f in written) and any(f.endswith("model.onnx") for f in written)

    [after] = plan_run(request, readonly, find_exports(readonly, request.model), farm=False)
    assert after.precision is None and _files(root) == written
    assert {t for j in after.jobs for t in j.targets} == BUILDABLE
    for j in after.jobs:  # every build carries the step's result: converted key, digest, accuracy, pinned nodes
        assert j.model.precision == run.step and j.model.plan_digest == run.step.converted_digest
    if case == "auto-pin":
        assert run.step.accuracy is not None and run.step.gate_detail.startswith("fp16 gate passed")


PLAN_FARM = """
import json, sys
from trtfarm.pipeline import plan_run
from trtfarm.run_setup import find_exports
from trtfarm.planning.requests import MatrixRequest
from trtfarm.store import open_store
from tests.test_plan_decides import WritesRefused
store, fleet = sys.argv[1], sys.argv[2]
readonly = WritesRefused(open_store(store))
request = MatrixRequest(store=store, targets_file=fleet, precision="fp16")
[plan] = plan_run(request, readonly, find_exports(readonly, "encoder"), farm=True)
print(json.dumps({"job": plan.precision is not None, "builds": len(plan.jobs),
                  "modelopt": sorted(m for m in sys.modules if m.split(".")[0] == "modelopt")}))
"""


def test_the_farms_planning_of_an_fp16_model_imports_no_modelopt(example_dir, fleet_file, tmp_path):
    from trtfarm.publishing.registry import register_export

    store = str(tmp_path / "store")
    register_export(open_store(store), example_dir)
    proc = subprocess.run([sys.executable, "-c", PLAN_FARM, store, str(fleet_file)], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"job": True, "builds": 0, "modelopt": []}


def _build(workdir: Path, model: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtfarm", "build", str(model), "--store", str(workdir / "store"),
                           "--targets-file", str(workdir / "gpu_targets.yaml"), "--json", *args],
                          capture_output=True, text=True, timeout=900, cwd=workdir,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "2000"})


def test_trtfarm_build_of_fp16_builds_then_is_up_to_date_and_a_refused_gate_exits_as_before(
        example_onnx, overflow_model, fleet_file, tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(fleet_file.read_text())
    first = _build(tmp_path, example_onnx, "--precision", "fp16", "--release")
    assert first.returncode == 0, first.stderr
    rows = {r["target"]: r for r in json.loads(first.stdout)}
    assert {t for t, r in rows.items() if r["status"] == "built"} == BUILDABLE
    from trtfarm.publishing.publish import read_manifest

    published = open_store(str(tmp_path / "store"))
    for target in BUILDABLE:  # published, with the precision step the job ran
        m = read_manifest(published, rows[target]["manifest"].split("/store/", 1)[1])
        assert m.precision.recipe == "fp16" and m.precision.converted_onnx_digest != m.model.onnx_digest
        assert m.verification.onnx.status == "passed"
    again = _build(tmp_path, example_onnx, "--precision", "fp16", "--release")
    assert again.returncode == 0, again.stderr
    assert {r["target"]: r["status"] for r in json.loads(again.stdout) if r["target"] in BUILDABLE} == \
        dict.fromkeys(BUILDABLE, "up-to-date")

    model, heldout = overflow_model
    ovf = tmp_path / "ovf"
    ovf.mkdir()
    (ovf / "model.onnx").write_bytes(model.read_bytes())
    (ovf / "heldout.npz").write_bytes(heldout.read_bytes())
    (ovf / "farm.yaml").write_text("name: ovf\nprecision: {mode: fp16, data_max: .inf, task: classifier}\n"
                                   "profiles:\n  - pixels: 1x64:8x64:16x64\n")
    refused = _build(tmp_path, ovf / "model.onnx")
    assert refused.returncode == 1, refused.stderr  # a failed target: exit 1, as before the step was a job
    rows = json.loads(refused.stdout)
    assert {r["status"] for r in rows} == {"failed"} and len(rows) == 4
    assert all(r["reason"].startswith("fp16 accuracy gate failed: h2 (output of fc2, MatMul): FP16 overflow")
               and "Fix: trtfarm precision" in r["reason"] for r in rows)
    store = open_store(str(tmp_path / "store"))
    assert list(store.list("plans/ovf/")) == [] and list(store.list("releases/ovf/")) == []
    [report] = [k for k in store.list("converted/ovf/")]
    assert report.endswith("report.json")  # the refused step's report, kept for diagnosis; no converted model
