"""A GPU host where nothing can be built says so: the exit code and the last line, not `1 skipped` and exit 0.

The GPU comes through NVML's seam (tests/fake_nvml: an H200 as NVML names it); the toolchain check is real (no
TensorRT is installed here, and TensorRT-RTX does not serve compute capability 9.0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO
from .models import write_small_cnn

H200 = "NVIDIA H200:9.0:140.4"  # as NVML reported it on an H200 host


def run(args, cwd, gpus=H200):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    env.update(PYTHONPATH=str(REPO / "tests/fake_nvml"), FAKE_NVML_GPUS=gpus, COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_gpu_host_without_its_toolchain_builds_nothing_and_says_so(tmp_path, as_json):
    write_small_cnn(tmp_path / "model.onnx")
    done = run(["build", "model.onnx", *(["--json"] if as_json else [])], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: nothing was built") and "tensorrt==11.4.0.106" in last, done.stderr
    assert "h200-trt11.4" in last and "Traceback" not in done.stderr
    if as_json:
        assert [r["status"] for r in json.loads(done.stdout)] == ["skipped"]
    else:
        seen = run(["targets"], tmp_path).stdout
        assert "1 skipped" in done.stdout and "this machine: NVIDIA H200, PCI 0x2335" in seen and "cc 9.0" in seen
    assert not (tmp_path / "trtfarm-store" / "plans").exists()


def test_one_built_target_among_skipped_ones_is_still_success(tmp_path):
    write_small_cnn(tmp_path / "model.onnx")
    done = run(["build", "model.onnx"], tmp_path, gpus=f"{H200};NVIDIA GeForce RTX 4090:8.9:23.5")
    assert done.returncode == 0 and "1 built, 1 skipped" in done.stdout, done.stdout + done.stderr
