"""The local build path at the builder's cost: TensorRT filters its own log, and the command imports only what it
uses (``python -X importtime`` lists every module a run imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def run(cwd: Path, *args: str, python: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(cwd / "tmp")}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, *python, "-m", "trtfarm", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_tensorrt_prints_nothing_of_a_build_by_default_and_its_whole_log_with_verbose(workdir, example_dir):
    quiet = run(workdir, "build", str(example_dir / "model.onnx"), "--json", "--store", "quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "[TRT]" not in quiet.stderr, quiet.stderr[-2000:]
    loud = run(workdir, "build", str(example_dir / "model.onnx"), "--json", "--store", "loud", "--verbose")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert [r["status"] for r in json.loads(loud.stdout)] == ["built"]
    verbose = [line for line in loud.stderr.splitlines() if "[TRT] [V]" in line]
    assert len(verbose) > 1000, loud.stderr[-2000:]  # TensorRT's VERBOSE log of the build, as TensorRT prints it
