"""Worker admission: a worker serves a pool only when its GPU and toolchains match the pool's targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.project.fleet_file import load_fleet
from trtfarm.workers.admission import check_worker

from .conftest import REPO

FLEET = load_fleet(REPO / "gpu_targets.yaml")
NO_GPU = GpuScan((), None, "NVML unavailable")
H100 = GpuScan((LocalGpu(0, "NVIDIA H100 80GB HBM3", "9.0", 80.0),), "580.0")
H200 = GpuScan((LocalGpu(0, "NVIDIA H200", "9.0", 141.0, "0x2335"),), "580.0")  # PCI id as NVML read it there
TRT = {"tensorrt": "11.4.0.106", "tensorrt_rtx": None}


def test_a_gpu_pool_needs_its_gpu_model_even_with_the_same_compute_capability():
    refused = check_worker(FLEET, "gpu-h100", H200, {"tensorrt": "11.4.0.106"})
    assert not refused.ok and ("builds on NVIDIA H100 80GB HBM3 (PCI 0x2330, cc 9.0); this machine has NVIDIA H200 "
                               "(PCI 0x2335, cc 9.0): NVIDIA H200 (PCI 0x2335, cc 9.0) is a sibling of") \
        in refused.problems[0]
    assert "NVIDIA H200 (PCI 0x2335, cc 9.0)" in refused.found


def test_every_toolchain_of_the_pool_must_be_installed_at_its_version():
    partial = check_worker(FLEET, "gpu-h100", H100, TRT)  # the pool also has a TensorRT 10.16 target
    assert len(partial.problems) == 1
    assert "h100-trt10.16 needs tensorrt 10.16.1.11; installed: 11.4.0.106" in partial.problems[0]
    assert partial.targets == ["h100-trt11.4", "h100-trt10.16"]


def test_an_rtx_pool_accepts_a_cpu_only_machine_with_the_right_tensorrt_rtx():
    assert check_worker(FLEET, "rtx-4090", NO_GPU, {"tensorrt_rtx": "1.7.1.116"}).ok
    old = check_worker(FLEET, "rtx-4090", NO_GPU, {"tensorrt_rtx": "1.6.0.5"})
    assert not old.ok and "needs tensorrt_rtx 1.7.1.116; installed: 1.6.0.5" in old.problems[0]


def test_the_command_refuses_a_mismatched_pool_before_starting_prefect(tmp_path):
    env = {**os.environ, "PREFECT_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "trtfarm", "worker", "--targets-file", str(REPO / "gpu_targets.yaml")]
    refused = subprocess.run(cmd + ["--pool", "gpu-h100", "--check-only"], capture_output=True, text=True, env=env)
    assert refused.returncode == 3 and "refusing to serve pool 'gpu-h100'" in refused.stderr
    ok = subprocess.run(cmd + ["--pool", "rtx-4090", "--check-only", "--json"], capture_output=True, text=True,
                        env=env, check=True)
    assert json.loads(ok.stdout)["ok"] is True


def test_a_worker_for_one_toolchain_queue_needs_only_that_toolchain():
    one = check_worker(FLEET, "gpu-h100", H100, TRT, queue="tensorrt-11.4.0.106")
    assert one.ok and one.targets == ["h100-trt11.4"]
    wrong = check_worker(FLEET, "gpu-h100", H100, TRT, queue="tensorrt-10.16.1.11")
    assert not wrong.ok and "h100-trt10.16 needs tensorrt 10.16.1.11; installed: 11.4.0.106" in wrong.problems[0]
    unknown = check_worker(FLEET, "gpu-h100", H100, TRT, queue="tensorrt-9.0")
    assert not unknown.ok and "pool 'gpu-h100' has no queue 'tensorrt-9.0'" in unknown.problems[0]


def test_the_control_pool_accepts_any_machine():
    assert check_worker(FLEET, "trtfarm-control", NO_GPU, {}).ok
