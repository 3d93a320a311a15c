"""One rule says which fleet GPU a device is: ``pull``, ``verify`` and the worker's self-check agree on every device.

Each device comes through NVML's seam (tests/fake_nvml, pynvml's documented shapes) in a process of its own; there
``pull`` picks this host's fleet GPU (``local_gpu_key``), ``verify`` checks a plan of each target against the device
(``gpu_check``, on the manifest of a real plan with its target changed to that GPU's), and the worker's self-check
(``check_worker``) admits or refuses each GPU's pool. All three must name the same GPU, or none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import REPO

FLEET = """\
version: 1
toolchains:
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106"}
gpus:
  h100-sxm: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0", memory_gib: 80,
             pool: h100-sxm}
  h100-pcie: {nvml_name: "NVIDIA H100 PCIe", pci_ids: ["0x2331"], compute_capability: "9.0", memory_gib: 80,
              pool: h100-pcie}
  h100-1g: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0", memory_gib: 10,
            pool: h100-1g, mig: 1g.10gb}
  a10: {nvml_name: "NVIDIA A10", pci_ids: ["0x2236"], compute_capability: "8.6", memory_gib: 24, pool: a10}
  l4: {nvml_name: "NVIDIA L4", compute_capability: "8.9", memory_gib: 22, pool: l4}
targets:
  - {id: h100-sxm, gpu: h100-sxm, toolchain: trt-11.4}
  - {id: h100-pcie, gpu: h100-pcie, toolchain: trt-11.4}
  - {id: h100-1g, gpu: h100-1g, toolchain: trt-11.4}
  - {id: a10, gpu: a10, toolchain: trt-11.4}
  - {id: l4, gpu: l4, toolchain: trt-11.4}
"""
DEVICES = {  # FAKE_NVML_GPUS -> the fleet GPU it is (None: none of them)
    "NVIDIA H100 80GB HBM3:9.0:79.6": "h100-sxm",
    "NVIDIA H100 PCIe:9.0:79.6": "h100-pcie",  # a sibling of h100-sxm: told apart by its PCI id
    "NVIDIA H100 80GB HBM3:9.0:79.6:mig=1g.10gb": "h100-1g",  # the same PCI id as h100-sxm, a MIG instance
    "NVIDIA A10:8.6:22.5": "a10",
    "NVIDIA A10G:8.6:22.5": None,  # a10's sibling, which the fleet does not declare
    "NVIDIA L4:8.9:22.0": "l4",  # no PCI id declared: by NVML name and compute capability
    "NVIDIA L4:8.6:22.0": None,  # the name, another compute capability
    "NVIDIA H100 NVL:9.0:93.6": None,
}
PROBE = """
import json, os, sys
from trtfarm.errors import UserInputError
from trtfarm.machine.gpu import scan_gpus
from trtfarm.project.fleet_file import load_fleet
from trtfarm.runtime.loader import gpu_check
from trtfarm.runtime.pull import local_gpu_key
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.manifest import manifest_from_json
from trtfarm.workers.admission import check_worker

fleet, template = load_fleet(sys.argv[1]), manifest_from_json(open(sys.argv[2]).read())
targets = select_targets(fleet)


def manifest_of(t):
    fields = dict(gpu=t.gpu_key, gpu_name=t.gpu.nvml_name, compute_capability=t.gpu.compute_capability,
                  compat_class=t.compat_class, flavour="tensorrt", toolchain_version=t.toolchain.version,
                  pci_ids=list(t.gpu.pci_ids), mig=t.mig)
    return template.model_copy(update={"target": template.target.model_copy(update=fields)})


found = {}
for device in sys.argv[3:]:
    os.environ["FAKE_NVML_GPUS"] = device
    scan = scan_gpus()
    try:
        pulled = local_gpu_key(fleet, scan, None)
    except UserInputError:
        pulled = None
    workers = [k for k, g in fleet.gpus.items() if check_worker(fleet, g.pool, scan, {"tensorrt": "11.4.0.106"}).ok]
    verified = [t.gpu_key for t in targets if gpu_check(manifest_of(t), scan).ok]
    found[device] = {"pull": pulled, "worker": workers, "verify": verified, "scan": scan.describe()}
print(json.dumps(found))
"""


def test_pull_verify_and_the_worker_name_the_same_fleet_gpu_for_each_device(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(FLEET)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    env.update(PYTHONPATH=f"{REPO / 'tests/fake_nvml'}{os.pathsep}{REPO}")
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "gpu_targets.yaml"),
                           str(REPO / "tests/data/manifest_encoder_rtx4090.json"), *DEVICES],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for device, gpu in DEVICES.items():
        seen = found[device]
        assert seen["scan"].startswith(device.split(":")[0]), seen  # the device came through the fake NVML
        assert seen["pull"] == gpu, (device, seen)
        assert seen["worker"] == seen["verify"] == ([gpu] if gpu else []), (device, seen)
