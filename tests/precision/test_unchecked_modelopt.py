"""Another ModelOpt than the one the workarounds were compared with is refused, in one line, unless the user says so.

Faked the way an install changes it: a ``nvidia_modelopt-0.48.0.dist-info`` folder on ``PYTHONPATH`` is the
distribution ``importlib.metadata`` finds first, while the modules imported stay ModelOpt 0.47's. Each command is the
real command line in a process of its own.
"""

from __future__ import annotations

import json
import shutil

import pytest

from trtfarm.errors import UserInputError
from trtfarm.precision import library_versions as versions

from ..conftest import REPO, write_overflow_model
from .test_child import cli, finished

pytestmark = pytest.mark.integration


def test_versions_other_than_those_compared_are_refused_in_one_line_naming_them(monkeypatch):
    monkeypatch.setattr(versions, "installed", {"nvidia-modelopt": "0.48.1", "onnxruntime": "1.32.0+cpu",
                                                "polygraphy": "0.53.6"}.get)
    assert versions.unchecked_versions() == {"nvidia-modelopt": "0.48.1"}
    with pytest.raises(UserInputError) as refused:
        versions.refuse_unchecked(allowed=False)
    assert str(refused.value) == (
        "nvidia-modelopt 0.48.1 installed, but trtfarm's ModelOpt workarounds were compared with nvidia-modelopt "
        "0.47.0: `pip install 'nvidia-modelopt==0.47.0'`, or pass --unchecked-modelopt to run them unchecked (the "
        "step's record and the plan's manifest say so)")
    assert versions.refuse_unchecked(allowed=True) == {"nvidia-modelopt": "0.48.1"}
    monkeypatch.setattr(versions, "installed", {"nvidia-modelopt": "0.47.0", "onnxruntime": None}.get)
    assert versions.unchecked_versions() == {}  # not installed is not refused here: its import names the extra


def test_the_installed_versions_are_the_ones_compared():
    """The suite's own install: the workarounds it tests are the ones the step runs."""
    assert versions.unchecked_versions() == {}


def test_another_modelopt_is_refused_by_the_command_and_runs_recorded_with_the_flag(tmp_path):
    model, heldout = write_overflow_model(tmp_path)
    args = ["precision", str(model), "--mode", "fp16", "--heldout", str(heldout)]
    code, out, err = finished(cli(args, tmp_path, fake_modelopt="0.48.0"))
    assert code == 2 and out == "", err
    assert err.strip().splitlines() == [
        "error: nvidia-modelopt 0.48.0 installed, but trtfarm's ModelOpt workarounds were compared with "
        "nvidia-modelopt 0.47.0: pip install 'nvidia-modelopt==0.47.0', or pass --unchecked-modelopt to run them "
        "unchecked (the step's record and the plan's manifest say so)"]
    assert not (tmp_path / "model_fp16.onnx").exists()

    code, out, err = finished(cli([*args, "--unchecked-modelopt", "--json"], tmp_path, fake_modelopt="0.48.0"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["unchecked_versions"] == {"nvidia-modelopt": "0.48.0"} and doc["gate"]["verdict"] == "passed"
    code, out, err = finished(cli([*args, "--unchecked-modelopt"], tmp_path, fake_modelopt="0.48.0"))
    assert code == 0 and out.rstrip().endswith(
        "Warning: converted with --unchecked-modelopt: nvidia-modelopt 0.48.0 (compared: 0.47.0)."), out[-1000:]


def test_a_build_with_the_flag_records_the_versions_in_the_manifest(tmp_path):
    model, heldout = write_overflow_model(tmp_path)
    shutil.copy(REPO / "gpu_targets.yaml", tmp_path / "gpu_targets.yaml")
    args = ["build", str(model), "--precision", "fp16", "--heldout", str(heldout), "--target", "rtx-4090-rtx1.7",
            "--profile", "pixels=1x64:8x64:16x64"]
    code, out, err = finished(cli(args, tmp_path, fake_modelopt="0.48.0"))
    assert code == 2 and "error: nvidia-modelopt 0.48.0 installed" in err and "--unchecked-modelopt" in err
    code, out, err = finished(cli([*args, "--unchecked-modelopt"], tmp_path, fake_modelopt="0.48.0"))
    assert code == 0, out + err
    manifests = list((tmp_path / "trtfarm-store").rglob("manifest.json"))
    assert len(manifests) == 1
    accuracy = json.loads(manifests[0].read_text())["precision"]["accuracy"]
    assert accuracy["unchecked_versions"] == {"nvidia-modelopt": "0.48.0"} and accuracy["passed"] is True
