"""``verify``, ``load_plan`` and ``pull --check`` on GPU identity: siblings, declared groups, the header check.

The host's GPU is the stand-in NVML (tests/fake_nvml) for the commands, a ``GpuScan`` for ``load_plan``. A TensorRT
plan is model-specific, so its siblings are refused; TensorRT is not installed on this CPU host, so that plan is a
TensorRT header and made-up bytes under a manifest of an H100 PCIe target whose group serves the H100 NVL (as
tests/test_chain_loader.py makes its plans). The header-check cases use real TensorRT-RTX builds: with no GPU here,
the real bindings' ``get_engine_validity`` says INVALID, and that is all a CPU host can honestly show of it.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from trtfarm.errors import UserInputError
from trtfarm.runtime.loader import PlanMismatch, load_plan
from trtfarm.runtime.plan_files import manifest_beside
from trtfarm.vocabulary.manifest import ServedGpu, manifest_from_json

from .chain_farm import TEMPLATE, rtx_header
from .test_gpu_identity import scan, trtfarm

TRT = {"tensorrt": "11.4.0.106", "tensorrt_rtx": None}
SXM, NVL = "NVIDIA H100 80GB HBM3:9.0:79.6", "NVIDIA H100 NVL:9.0:93.6"


def h100_pcie_plan(folder):
    """A TensorRT 11.4 plan for the H100 PCIe (0x2331) whose declared group serves the H100 NVL (0x2321)."""
    data = rtx_header((11, 4, 0, 106), magic=b"ftrt") + bytes(500)
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "enc.plan"
    plan.write_bytes(data)
    t = manifest_from_json(TEMPLATE.read_bytes())
    target = t.target.model_copy(update={
        "target_id": "h100-pcie", "gpu": "h100-pcie", "gpu_name": "NVIDIA H100 PCIe", "compute_capability": "9.0",
        "compat_class": "h100-pcie", "flavour": "tensorrt", "toolchain_version": "11.4.0.106",
        "pci_ids": ["0x2331"], "serves": [ServedGpu(gpu="h100-pcie", gpu_name="NVIDIA H100 PCIe", pci_ids=["0x2331"]),
                                          ServedGpu(gpu="h100-nvl", gpu_name="NVIDIA H100 NVL", pci_ids=["0x2321"])]})
    m = t.model_copy(update={"target": target, "plan": t.plan.model_copy(
        update={"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})})
    manifest_beside(plan).write_bytes(m.to_json())
    return plan


def test_load_plan_refuses_an_undeclared_sibling_and_passes_a_declared_group_member_to_the_runtime(tmp_path):
    plan = h100_pcie_plan(tmp_path)
    with pytest.raises(PlanMismatch) as err:
        load_plan(plan, installed=TRT, gpus=scan("NVIDIA H100 80GB HBM3", "9.0", "0x2330"))
    (line,) = err.value.differences  # the GPU is the only difference
    assert "NVIDIA H100 80GB HBM3 (PCI 0x2330, cc 9.0) is a sibling of NVIDIA H100 PCIe (PCI 0x2331, cc 9.0)" in line
    assert "declare the group" in line
    with pytest.raises(UserInputError) as err:  # every check passes: the runtime is next, and it is not here
        load_plan(plan, installed=TRT, gpus=scan("NVIDIA H100 NVL", "9.0", "0x2321"))
    assert not isinstance(err.value, PlanMismatch) and "tensorrt" in str(err.value)


def verify_json(plan, cwd, gpus):
    done = trtfarm(["verify", str(plan), "--json"], cwd, gpus)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    return done, {c["check"]: (c["ok"], c["detail"]) for c in doc["checks"]}


def test_verify_refuses_an_undeclared_sibling_and_accepts_a_declared_group_member(tmp_path):
    plan = h100_pcie_plan(tmp_path / "host")
    done, checks = verify_json(plan, tmp_path, SXM)
    ok, detail = checks["gpu"]
    assert done.returncode == 1 and ok is False and "is a sibling of NVIDIA H100 PCIe (PCI 0x2331" in detail
    assert "is a sibling of" in done.stderr.splitlines()[-1]
    done, checks = verify_json(plan, tmp_path, NVL)
    ok, detail = checks["gpu"]
    assert ok is True and "PCI 0x2321 is h100-nvl's, which the plan serves through the declared group " \
        "(serves: h100-pcie, h100-nvl)" in detail
    # TensorRT is not installed on this host: that is the only refusal left, and the runtime is not asked
    assert [k for k, (ok, _) in checks.items() if ok is False] == ["toolchain"] and "runtime" not in checks


RTX_FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", pci_ids: ["0x2684"], compute_capability: "8.9", memory_gib: 24,
             pool: rtx}
targets:
  - {id: rtx-4090, gpu: rtx-4090, toolchain: rtx-1.7}
"""
RTX4090 = "NVIDIA GeForce RTX 4090:8.9:24.0"


@pytest.fixture
def released(tmp_path):
    """A real TensorRT-RTX build of the encoder for the RTX 4090, released in a store on disk."""
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.releases.moves import move_release
    from trtfarm.store import open_store

    from .conftest_builds import publish_export

    (tmp_path / "gpu_targets.yaml").write_text(RTX_FLEET)
    store = open_store((tmp_path / "store").as_uri())
    _, outcomes = publish_export(store, tmp_path / "gpu_targets.yaml", tmp_path / "export", 0, 1_700_000_000,
                                 ["rtx-4090"])
    key = outcomes["rtx-4090"].manifest.removeprefix(store.uri + "/")
    move_release(store, key, read_manifest(store, key), release_on="built", reason="test")
    return tmp_path, store.uri


def header_refusal(detail):
    assert detail.startswith("get_engine_validity: INVALID") and detail.endswith("; not deserialised"), detail
    assert "deserialize_cuda_engine" not in detail


def test_verify_reports_the_runtime_header_checks_verdict_and_does_not_deserialise(released):
    folder, uri = released
    got = trtfarm(["pull", "encoder", "--store", uri, "--to", str(folder / "enc.plan")], folder, RTX4090)
    assert got.returncode == 0, got.stderr  # pull alone does not ask the runtime
    done, checks = verify_json(folder / "enc.plan", folder, RTX4090)
    assert done.returncode == 1 and [k for k, (ok, _) in checks.items() if ok is False] == ["runtime"]
    assert checks["gpu"][0] is True and "class rtx-portable serves compute capability 8.9" in checks["gpu"][1]
    header_refusal(checks["runtime"][1])
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("refused: ")]
    assert "get_engine_validity: INVALID" in line and "not deserialised" in line


def test_pull_check_runs_verifys_checks_on_the_pulled_plan_and_says_the_verdict_in_one_line(released):
    folder, uri = released
    done = trtfarm(["pull", "encoder", "--store", uri, "--to", str(folder / "enc.plan"), "--check"], folder,
                   RTX4090)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (folder / "enc.plan").is_file() and "pulled releases/" in done.stdout
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("check: ")]
    assert line.startswith("check: refused: get_engine_validity: INVALID") and line.endswith("not deserialised")
    done = trtfarm(["pull", "encoder", "--store", uri, "--to", str(folder / "enc.plan"), "--check", "--json"],
                   folder, RTX4090)
    assert done.returncode == 1
    check = json.loads(done.stdout)["check"]
    rows = {c["check"]: c["ok"] for c in check["checks"]}
    assert check["ok"] is False and rows == {"sha256": True, "header": True, "identity": True, "toolchain": True,
                                             "gpu": True, "signature": None, "runtime": False}
    header_refusal(check["checks"][-1]["detail"])
    wrong = trtfarm(["pull", "encoder", "--store", uri, "--to", str(folder / "enc.plan"), "--check", "--gpu",
                     "rtx-4090"], folder, "Tesla T4:7.5:15.0")  # pulled for the 4090 on a T4: refused here
    assert wrong.returncode == 1
    (line,) = [x for x in wrong.stderr.splitlines() if x.startswith("check: ")]
    assert "class rtx-portable does not serve compute capability 7.5" in line
