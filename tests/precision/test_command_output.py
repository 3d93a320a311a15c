"""What the commands that load ModelOpt print, as a user runs them: the result is the last thing shown.

Each run is a subprocess (ModelOpt imports lief, a nanobind module, whose leak report at exit is the concern),
so each loads ModelOpt: three runs in all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ..conftest import REPO, write_overflow_model

pytestmark = pytest.mark.integration


def run(args, cwd, merged=True):
    env = {**os.environ, "PREFECT_HOME": str(cwd / ".prefect"), "COLUMNS": "2000"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, text=True, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE)
    assert proc.returncode == 0, proc.stdout + (proc.stderr or "")
    return proc


def test_precision_and_build_end_with_their_result(tmp_path):
    model, heldout = write_overflow_model(tmp_path)
    shutil.copy(REPO / "gpu_targets.yaml", tmp_path / "gpu_targets.yaml")

    text = run(["precision", str(model), "--mode", "fp16", "--heldout", str(heldout)], tmp_path).stdout
    lines = text.rstrip("\n").splitlines()
    assert "leaked" not in text and lines[-1].startswith("fp16 gate passed"), text[-2000:]

    as_json = run(["precision", str(model), "--mode", "fp16", "--heldout", str(heldout), "--json"], tmp_path,
                  merged=False)
    assert json.loads(as_json.stdout)["gate"]["passed"] is True  # nothing but the JSON on stdout
    assert not [line for line in as_json.stderr.splitlines() if "leaked" in line], as_json.stderr[:2000]

    built = run(["build", str(model), "--precision", "fp16", "--target", "rtx-4090-rtx1.7",
                 "--profile", "pixels=1x64:8x64:16x64"], tmp_path).stdout
    assert "leaked" not in built and built.rstrip("\n").splitlines()[-1] == "1 built", built[-2000:]
