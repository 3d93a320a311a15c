"""Nothing unjudged is released (issue 57): ``trtfarm build`` of a model its fp16 gate cannot judge, as a user runs it.

The model's ``dead`` output is ReLU of a strongly negative bias: zero for every input, so the fp16 gate is ``not
judged`` (tests/precision/test_not_judged.py). With farm.yaml's ``precision: fp16`` the build publishes the plan as
a trial, releases nothing, says why and the fix in one line at 80 columns, and exits 0 (nothing failed); ``pull``
finds nothing released. ``build --release`` releases it, and ``history`` shows the override: ``forced``, by whom and
why, and so does ``status``. The same model with a live output passes its gate and is released as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import forkcli
from .fleets import ONE_RTX_TARGET
from .precision.test_not_judged import two_outputs

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]
TC = "tensorrt_rtx-1.7.1.116"
SPEC = "name: {name}\nprecision: fp16\nprofiles:\n  - {{x: 1x16:8x16:32x16}}\n"


def trtfarm(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "TMPDIR": str(cwd / "tmp")}
    env.pop("PREFECT_API_URL", None)
    return forkcli.trtfarm(args, cwd=cwd, env=env, timeout=300)


def export(cwd: Path, name: str, bias: float) -> str:
    folder = cwd / name
    folder.mkdir()
    two_outputs(folder / "model.onnx", bias)
    (folder / "farm.yaml").write_text(SPEC.format(name=name))
    return f"{name}/model.onnx"


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def pulled(cwd: Path, name: str) -> subprocess.CompletedProcess:
    return trtfarm(cwd, "pull", name, "--gpu", "rtx-4090", "--toolchain", TC, "--store", "store", "--to",
                   f"{name}.plan")


def test_an_unjudged_fp16_build_is_a_trial_until_release_and_the_history_shows_the_override(workdir):
    model = export(workdir, "dead", bias=-1000.0)
    built = trtfarm(workdir, "build", model, "--store", "store")
    assert built.returncode == 0, built.stdout + built.stderr  # published, nothing failed: a trial, exit 0
    text = built.stdout
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines()), text
    said = " ".join(line.strip() for line in text[text.index("not released:"):].splitlines())
    assert said.startswith(f"not released: dead/rtx-4090 {TC} published as a trial: fp16 gate not judged "
                           "(no input carries signal on output 'dead'); fix: held-out data (--heldout heldout.npz, "
                           "or heldout.npz beside the export), or trtfarm build dead/model.onnx --release to "
                           "release it anyway (recorded in the history)"), text
    assert "1 built; 1 not released" in said and "\nreleased: dead" not in text
    nothing = pulled(workdir, "dead")
    assert nothing.returncode == 2 and "no released plan of 'dead'" in nothing.stderr, nothing.stderr
    none = trtfarm(workdir, "history", "dead", "--store", "store", "--json")
    assert none.returncode == 2 and "'dead' has no release in either channel" in none.stderr, none.stderr
    [row] = json.loads(trtfarm(workdir, "build", model, "--store", "store", "--json").stdout)
    assert (row["status"], row["released"], row["held_by"]) == ("up-to-date", False, "precision gate not judged")
    [cell] = json.loads(trtfarm(workdir, "status", "--store", "store", "--json").stdout)
    assert cell["state"] == "pending" and cell["reason"].startswith(  # the view says what holds it, not an engine check
        "held as a trial: fp16 gate not judged (no input carries signal on output 'dead'); fix: held-out data"), cell

    released = trtfarm(workdir, "build", model, "--store", "store", "--release")
    assert released.returncode == 0, released.stdout + released.stderr
    assert f"released: dead/rtx-4090 {TC}: nothing ->" in released.stdout
    assert pulled(workdir, "dead").returncode == 0
    [event] = json.loads(trtfarm(workdir, "history", "dead", "--store", "store", "--json").stdout)
    assert event["action"] == "forced" and event["by"] != "trtfarm", event
    assert event["reason"] == ("built by trtfarm; released anyway with --release; fp16 gate not judged (no input "
                               "carries signal on output 'dead')"), event
    assert event["gates"] == {"accuracy": "fp16 gate not judged (no input carries signal on output 'dead'): "
                                          "released anyway"}
    history = trtfarm(workdir, "history", "dead", "--store", "store").stdout
    assert "forced" in history and "released anyway with --release" in " ".join(history.split())


def test_a_model_its_gate_passes_is_released_as_before(workdir):
    model = export(workdir, "alive", bias=0.0)
    [row] = json.loads(trtfarm(workdir, "build", model, "--store", "store", "--json").stdout)
    assert (row["status"], row["released"], row["held_by"], row["verification"]["onnx"]) == \
        ("built", True, None, "passed"), row
    [event] = json.loads(trtfarm(workdir, "history", "alive", "--store", "store", "--json").stdout)
    assert (event["action"], event["by"], event["gates"]) == ("release", "trtfarm", None)
    assert pulled(workdir, "alive").returncode == 0
