"""GPU identity: siblings are different targets by PCI device id, a declared group is one, a MIG slice is its own.

The GPUs come through NVML's seam (tests/fake_nvml, pynvml's documented shapes); the fleets are real files; the plan
of the MIG test is a real TensorRT-RTX build whose header check runs in the real bindings here (no GPU: INVALID).
"""

from __future__ import annotations

import json
import os

import pytest

from trtfarm.machine.gpu import GpuScan, LocalGpu, MigInstance
from trtfarm.project.buildable import buildable_here
from trtfarm.project.fleet_file import load_fleet
from trtfarm.workers.admission import check_worker

from . import forkcli
from .conftest import REPO

SIBLINGS = """\
version: 1
toolchains:
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106"}
gpus:
  h100-sxm: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0", memory_gib: 80,
             pool: h100-sxm}
  h100-pcie: {nvml_name: "NVIDIA H100 PCIe", pci_ids: ["0x2331"], compute_capability: "9.0", memory_gib: 80,
              pool: h100-pcie}
  h100-nvl: {nvml_name: "NVIDIA H100 NVL", pci_ids: ["0x2321"], compute_capability: "9.0", memory_gib: 94,
             pool: h100-nvl}
  a10: {nvml_name: "NVIDIA A10", pci_ids: ["0x2236"], compute_capability: "8.6", memory_gib: 24, pool: a10}
  a10g: {nvml_name: "NVIDIA A10G", pci_ids: ["0x2237"], compute_capability: "8.6", memory_gib: 24, pool: a10g}
  l40: {nvml_name: "NVIDIA L40", pci_ids: ["0x26b5"], compute_capability: "8.9", memory_gib: 48, pool: l40}
  l40s: {nvml_name: "NVIDIA L40S", pci_ids: ["0x26b9"], compute_capability: "8.9", memory_gib: 48, pool: l40s}
  h100-1g: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0", memory_gib: 10,
            pool: h100-1g, mig: 1g.10gb}
targets:
  - {id: h100-sxm, gpu: h100-sxm, toolchain: trt-11.4}
  - {id: h100-pcie, gpu: h100-pcie, toolchain: trt-11.4, serves: [h100-pcie, h100-nvl]}
  - {id: a10, gpu: a10, toolchain: trt-11.4}
  - {id: a10g, gpu: a10g, toolchain: trt-11.4}
  - {id: l40, gpu: l40, toolchain: trt-11.4}
  - {id: l40s, gpu: l40s, toolchain: trt-11.4}
  - {id: h100-1g, gpu: h100-1g, toolchain: trt-11.4}
"""
DEVICES = {"NVIDIA H100 80GB HBM3:9.0:79.6": {"h100-sxm": "exact"},
           "NVIDIA H100 PCIe:9.0:79.6": {"h100-pcie": "exact"},
           "NVIDIA H100 NVL:9.0:93.6": {"h100-pcie": "group"},
           "NVIDIA A10:8.6:22.5": {"a10": "exact"}, "NVIDIA A10G:8.6:22.5": {"a10g": "exact"},
           "NVIDIA L40:8.9:44.5": {"l40": "exact"}, "NVIDIA L40S:8.9:44.5": {"l40s": "exact"},
           "NVIDIA H100 80GB HBM3:9.0:79.6:mig=1g.10gb": {"h100-1g": "exact"}}


def trtfarm(args, cwd, gpus):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    env.update(PYTHONPATH=f"{REPO / 'tests/fake_nvml'}{os.pathsep}{REPO}", FAKE_NVML_GPUS=gpus, COLUMNS="80")
    return forkcli.trtfarm(args, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_each_sibling_is_served_only_by_its_own_target_or_its_declared_group(tmp_path, device):
    (tmp_path / "gpu_targets.yaml").write_text(SIBLINGS)
    done = trtfarm(["targets", "--json"], tmp_path, device)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    served = {t["target"]: t["device_serves"] for t in doc["targets"] if t["device_serves"] != "no"}
    assert served == DEVICES[device]
    (dev,) = doc["machine"]["devices"]
    assert dev["pci_device_id"] == {"NVIDIA H100 80GB HBM3": "0x2330", "NVIDIA H100 PCIe": "0x2331"}.get(
        dev["name"], dev["pci_device_id"]) and dev["pci_vendor_id"] == "0x10de"
    siblings = [t for t in doc["targets"] if t["device_serves"] == "no" and t["compute_capability"] ==
                dev["compute_capability"] and not dev["mig"] and t["target"] != "h100-1g"]
    for t in siblings:
        assert "is a sibling of" in t["device_reason"] and "declare the group" in t["device_reason"], t


def test_the_mig_instance_reports_its_profile_and_a_whole_gpu_target_refuses_it(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(SIBLINGS)
    doc = json.loads(trtfarm(["targets", "--json"], tmp_path, "NVIDIA H100 80GB HBM3:9.0:79.6:mig=1g.10gb").stdout)
    (dev,) = doc["machine"]["devices"]
    assert dev["mig_mode"] is True and dev["mig"] == {"profile": "1g.10gb", "sm_count": 16, "memory_gib": 9.62}
    sxm = next(t for t in doc["targets"] if t["target"] == "h100-sxm")
    assert sxm["device_serves"] == "no" and "is a MIG 1g.10gb instance" in sxm["device_reason"]
    whole = json.loads(trtfarm(["targets", "--json"], tmp_path, "NVIDIA H100 80GB HBM3:9.0:79.6").stdout)
    one_g = next(t for t in whole["targets"] if t["target"] == "h100-1g")
    assert one_g["device_serves"] == "no" and "is a whole GPU" in one_g["device_reason"]


def scan(name, cc, pci, mig=None):
    inst = MigInstance(mig, 16, 9.6) if mig else None
    return GpuScan((LocalGpu(0, name, cc, 9.6 if mig else 80.0, pci, "0x10de", mig_mode=bool(mig), mig=inst),), "x")


def test_the_worker_self_check_refuses_an_undeclared_sibling_and_accepts_a_declared_one(tmp_path):
    path = tmp_path / "gpu_targets.yaml"
    path.write_text(SIBLINGS)
    fleet, trt = load_fleet(path), {"tensorrt": "11.4.0.106"}
    refused = check_worker(fleet, "h100-sxm", scan("NVIDIA H100 PCIe", "9.0", "0x2331"), trt)
    assert not refused.ok and "NVIDIA H100 PCIe (PCI 0x2331, cc 9.0) is a sibling of NVIDIA H100 80GB HBM3 (PCI " \
        "0x2330, cc 9.0)" in refused.problems[0]
    assert check_worker(fleet, "h100-pcie", scan("NVIDIA H100 NVL", "9.0", "0x2321"), trt).ok  # the group
    assert not check_worker(fleet, "a10", scan("NVIDIA A10G", "8.6", "0x2237"), trt).ok
    assert not check_worker(fleet, "h100-1g", scan("NVIDIA H100 80GB HBM3", "9.0", "0x2330"), trt).ok
    assert check_worker(fleet, "h100-1g", scan("NVIDIA H100 80GB HBM3", "9.0", "0x2330", "1g.10gb"), trt).ok


BAD = {
    "not hex": ('pci_ids: ["0x2330"]', 'pci_ids: ["0xZZ30"]', "is not 4 hex digits"),
    "a number": ('pci_ids: ["0x2330"]', "pci_ids: [0x2330]", "is a number: quote it"),
    "duplicated": ('pci_ids: ["0x2331"]', 'pci_ids: ["0x2330"]', "PCI id 0x2330 is declared by GPU 'h100-sxm' too"),
    "no such MIG profile": ("mig: 1g.10gb", "mig: 1g.11gb", "MIG profile '1g.11gb' does not exist on NVIDIA H100"),
    "group of an unknown GPU": ("serves: [h100-pcie, h100-nvl]", "serves: [h100-pcie, h100-nvx]",
                                "serves names unknown GPU 'h100-nvx'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_identity_input_is_one_line_with_its_place_in_the_file_and_exit_2(tmp_path, case):
    old, new, words = BAD[case]
    text = SIBLINGS.replace(old, new, 1)
    assert text != SIBLINGS
    (tmp_path / "gpu_targets.yaml").write_text(text)
    line = SIBLINGS[:SIBLINGS.index(old)].count("\n") + 1  # the line the change is on
    done = trtfarm(["targets"], tmp_path, "")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (msg,) = [m for m in done.stderr.strip().splitlines() if "gpu_targets.yaml:" in m]
    assert f"gpu_targets.yaml:{line}:" in msg and words in msg, msg


MIG_FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  a100-1g: {nvml_name: "NVIDIA A100-SXM4-80GB", pci_ids: ["0x20b2"], compute_capability: "8.0", memory_gib: 10,
            pool: a100-1g, mig: 1g.10gb}
  a100-pcie-1g: {nvml_name: "NVIDIA A100 80GB PCIe", pci_ids: ["0x20b5"], compute_capability: "8.0",
                 memory_gib: 10, pool: a100-pcie-1g, mig: 1g.10gb}
targets:
  - {id: a100-1g-rtx1.7, gpu: a100-1g, toolchain: rtx-1.7, serves: [a100-1g, a100-pcie-1g]}
"""


def test_a_mig_plan_records_its_group_and_loads_only_on_its_profile_after_the_header_check(tmp_path):
    """A real TensorRT-RTX build for a MIG target: the manifest lists every id it serves and its profile; load_plan
    refuses a whole GPU and another profile before any runtime call, and on the right instance asks the real
    bindings' get_engine_validity first (INVALID here, with no GPU) and does not deserialise."""
    from trtfarm.runtime.loader import PlanMismatch, load_plan
    from trtfarm.runtime.pull import pull_release
    from trtfarm.store import open_store

    from .conftest_builds import publish_export

    (tmp_path / "gpu_targets.yaml").write_text(MIG_FLEET)
    store = open_store((tmp_path / "store").as_uri())
    _, outcomes = publish_export(store, tmp_path / "gpu_targets.yaml", tmp_path / "export", 0, 1_700_000_000,
                                 ["a100-1g-rtx1.7"])
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.releases.moves import move_release

    key = outcomes["a100-1g-rtx1.7"].manifest.removeprefix(store.uri + "/")
    m = read_manifest(store, key)
    assert m.target.mig == "1g.10gb" and m.target.pci_ids == ["0x20b2"] and m.build.device is None
    assert [(s.gpu, s.pci_ids) for s in m.target.serves] == [("a100-1g", ["0x20b2"]), ("a100-pcie-1g", ["0x20b5"])]
    move_release(store, key, m, release_on="built", reason="test")
    got = pull_release(store, "encoder", "a100-1g", ["tensorrt_rtx-1.7.1.116"], tmp_path / "host" / "enc.plan")
    rtx = {"tensorrt_rtx": "1.7.1.116"}
    for device, words in ((scan("NVIDIA A100-SXM4-80GB", "8.0", "0x20b2"), "is a whole GPU"),
                          (scan("NVIDIA A100-SXM4-80GB", "8.0", "0x20b2", "2g.20gb"), "is a MIG 2g.20gb instance")):
        with pytest.raises(PlanMismatch) as err:
            load_plan(got.plan, installed=rtx, gpus=device)
        assert words in str(err.value) and "get_engine_validity" not in str(err.value)
    with pytest.raises(PlanMismatch) as err:
        load_plan(got.plan, installed=rtx, gpus=scan("NVIDIA A100 80GB PCIe", "8.0", "0x20b5", "1g.10gb"))
    (line,) = err.value.differences
    assert "header check refused it, so it was not deserialised: get_engine_validity: INVALID" in line
    assert "deserialize_cuda_engine" not in line and "\n" not in line


WHOLE_AND_SLICE = """\
version: 1
toolchains:
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106"}
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  h100: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0", memory_gib: 80,
         pool: h100}
  h100-1g.10gb: {nvml_name: "NVIDIA H100 80GB HBM3", pci_ids: ["0x2330"], compute_capability: "9.0",
                 memory_gib: 10, pool: h100-1g, mig: 1g.10gb}
  a100: {nvml_name: "NVIDIA A100-SXM4-80GB", pci_ids: ["0x20b2"], compute_capability: "8.0", memory_gib: 80,
         pool: a100}
  a100-1g.10gb: {nvml_name: "NVIDIA A100-SXM4-80GB", pci_ids: ["0x20b2"], compute_capability: "8.0",
                 memory_gib: 10, pool: a100-1g, mig: 1g.10gb}
targets:
  - {id: h100, gpu: h100, toolchain: trt-11.4, settings: {hardware_compatibility: same_compute_capability}}
  - {id: h100-1g.10gb, gpu: h100-1g.10gb, toolchain: trt-11.4,
     settings: {hardware_compatibility: same_compute_capability}}
  - {id: a100, gpu: a100, toolchain: rtx-1.7}
  - {id: a100-1g.10gb, gpu: a100-1g.10gb, toolchain: rtx-1.7}
"""


def _whole_and_slice_plans(tmp_path, caps=None):
    from trtfarm.identity import build_digest
    from trtfarm.modelfile import model_source
    from trtfarm.profiles.profile import profile_from_args
    from trtfarm.vocabulary.fleet import select_targets
    from trtfarm.vocabulary.targets import plan_targets, profiles_json

    from .conftest import ENCODER_PROFILE, make_model

    (tmp_path / "gpu_targets.yaml").write_text(WHOLE_AND_SLICE)
    (tmp_path / "export").mkdir()
    path = tmp_path / "export" / "model.onnx"
    path.write_bytes(make_model.encoder_model(0).SerializeToString(deterministic=True))
    model, profiles = model_source(path, "encoder"), [profile_from_args(ENCODER_PROFILE)]
    plans = plan_targets(model, model.onnx_digest, select_targets(load_fleet(tmp_path / "gpu_targets.yaml")),
                         profiles, buildable_here(caps) if caps else None)
    for p in plans:  # a whole GPU's digest is what it was before MIG profiles: its published plans stay current
        t = p.target
        base = build_digest(converted_onnx_digest=model.onnx_digest, profiles=profiles_json(profiles),
                            settings=t.settings.model_dump(mode="json"), flavour=t.toolchain.flavour.value,
                            toolchain_version=t.toolchain.version, compat_class=t.compat_class.split("@")[0])
        assert (p.build_digest == base) is (t.mig is None), t.id
    return model, profiles, plans


def test_a_mig_target_is_its_own_build_digest_and_its_own_job(tmp_path):
    """A portable class (sm90, rtx-portable) would let one plan serve a whole GPU and its MIG slice; the profile is
    in the class and the digest, so the planner makes one job per target."""
    from trtfarm.vocabulary.targets import group_by_build

    _, _, plans = _whole_and_slice_plans(tmp_path)
    classes = {p.target.id: p.target.compat_class for p in plans}
    assert classes == {"h100": "sm90", "h100-1g.10gb": "sm90@1g.10gb", "a100": "rtx-portable",
                       "a100-1g.10gb": "rtx-portable@1g.10gb"}
    assert len({p.build_digest for p in plans}) == 4
    assert [[p.target.id for p in g] for g in group_by_build(plans)] == [[p.target.id] for p in plans]


def test_a_real_build_for_a_whole_gpu_and_its_mig_slice_is_two_plans_neither_standing_for_the_other(tmp_path):
    """Real TensorRT-RTX builds: the A100 and its 1g.10gb slice each get a build of their own (no "shares the ...
    build"), each manifest says it was built for its own target, and the gpu check refuses each on the other."""
    from trtfarm.building.build import build_group
    from trtfarm.machine.capabilities import local_capabilities
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.runtime.loader import gpu_check
    from trtfarm.store import open_store
    from trtfarm.vocabulary.targets import group_by_build

    model, profiles, plans = _whole_and_slice_plans(tmp_path, local_capabilities())
    store = open_store((tmp_path / "store").as_uri())
    rtx = [p for p in plans if p.target.toolchain.flavour.value == "tensorrt_rtx"]
    outcomes = [o for g in group_by_build(rtx) for o in build_group(store, model, g, profiles)]
    assert [(o.target, o.status) for o in outcomes] == [("a100", "built"), ("a100-1g.10gb", "built")]
    assert not any("shares the" in o.reason for o in outcomes), [o.reason for o in outcomes]
    m = {o.target: read_manifest(store, o.manifest_key) for o in outcomes}
    assert {t: (x.build.built_for_target, x.target.mig) for t, x in m.items()} == {
        "a100": ("a100", None), "a100-1g.10gb": ("a100-1g.10gb", "1g.10gb")}
    assert m["a100"].plan.key != m["a100-1g.10gb"].plan.key
    whole, slice_ = scan("NVIDIA A100-SXM4-80GB", "8.0", "0x20b2"), scan("NVIDIA A100-SXM4-80GB", "8.0", "0x20b2",
                                                                        "1g.10gb")
    assert gpu_check(m["a100"], whole).ok and gpu_check(m["a100-1g.10gb"], slice_).ok
    assert gpu_check(m["a100"], slice_).ok is False and gpu_check(m["a100-1g.10gb"], whole).ok is False


@pytest.mark.parametrize("level, same, serves_86", [("same_compute_capability", False, False),
                                                    ("ampere_plus", True, True), ("none", True, True)])
def test_a_tensorrt_rtx_hardware_level_decides_which_capabilities_share_a_plan(level, same, serves_86):
    """TensorRT-RTX plans are portable by default; at same_compute_capability a plan runs only on its GPU's capability,
    so an RTX 4090 (8.9) and an RTX 3090 (8.6) get two builds and the 4090's plan is refused on the 3090."""
    from trtfarm.machine.match import fit
    from trtfarm.vocabulary.device_spec import spec_of_target
    from trtfarm.vocabulary.fleet import Fleet, select_targets

    fleet = Fleet.model_validate({
        "version": 1, "toolchains": {"rtx": {"flavour": "tensorrt_rtx", "version": "1.7.1.116"}},
        "gpus": {"rtx-4090": {"nvml_name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9", "memory_gib": 24,
                              "pool": "a"},
                 "rtx-3090": {"nvml_name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "memory_gib": 24,
                              "pool": "b"}},
        "targets": [{"id": g, "gpu": g, "toolchain": "rtx", "settings": {"hardware_compatibility": level}}
                    for g in ("rtx-4090", "rtx-3090")]})
    t4090, t3090 = select_targets(fleet)
    assert (t4090.compat_class == t3090.compat_class) is same
    on_3090 = fit(spec_of_target(t4090), scan("NVIDIA GeForce RTX 3090", "8.6", "0x2204").gpus[0])
    assert on_3090.ok is serves_86, on_3090.reason
