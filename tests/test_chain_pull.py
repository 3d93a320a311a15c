"""``trtfarm pull``'s choices and refusals in process, on the fast farm (tests/chain_farm.py): which GPU and toolchain
this host is, where the plan lands, the serving image it must match, and that nothing refused reaches the host."""

from __future__ import annotations

import json

import pytest

from trtfarm import layout
from trtfarm.errors import IntegrityError, UserInputError
from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.release import refresh_release
from trtfarm.publishing.serving_pin import ServingImageMismatch
from trtfarm.runtime.pull import local_gpu_key, local_toolchains, pull_release
from trtfarm.signing.bundle import SignatureRefused

from .chain_farm import T1, TC, Farm, refused
from .fleets import REFIT_FLEET


@pytest.fixture
def farm(tmp_path):
    return Farm(tmp_path / "farm")


@pytest.fixture
def fleet(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(REFIT_FLEET)
    return load_fleet(tmp_path / "gpu_targets.yaml")


def scan(*names: str) -> GpuScan:
    cc = {"NVIDIA GeForce RTX 3090": "8.6", "Tesla T4": "7.5"}
    return GpuScan(tuple(LocalGpu(i, n, cc.get(n, "8.9"), 24.0) for i, n in enumerate(names)), "580.0")


def test_this_hosts_gpu_is_the_fleets_gpu_of_that_name_unless_told(fleet):
    assert local_gpu_key(fleet, scan("NVIDIA GeForce RTX 3090"), None) == "rtx-3090"
    assert local_gpu_key(fleet, scan("Tesla T4", "NVIDIA GeForce RTX 4090"), None) == "rtx-4090"  # any of its GPUs
    assert local_gpu_key(fleet, scan("NVIDIA GeForce RTX 3090"), "rtx-4090") == "rtx-4090"  # --gpu wins
    with pytest.raises(UserInputError) as err:
        local_gpu_key(fleet, scan(), "h100")
    assert str(err.value) == "--gpu 'h100' is not in the fleet; known GPUs: rtx-3090, rtx-4090"
    with pytest.raises(UserInputError) as err:
        local_gpu_key(fleet, scan("Tesla T4"), None)
    assert str(err.value) == ("this host has Tesla T4 (cc 7.5), which matches no GPU in the fleet; pass --gpu KEY (one "
                              "of ['rtx-3090', 'rtx-4090']) to pull for another host")


def test_this_hosts_toolchains_are_the_ones_that_import_unless_told():
    assert local_toolchains({"tensorrt": "11.4.0.106", "tensorrt_rtx": None}, None) == ["tensorrt-11.4.0.106"]
    assert local_toolchains({"tensorrt": "11.4.0.106", "tensorrt_rtx": "1.7.1.116"}, None) == [
        "tensorrt-11.4.0.106", "tensorrt_rtx-1.7.1.116"]
    assert local_toolchains({}, TC) == [TC]
    with pytest.raises(UserInputError) as err:
        local_toolchains({"tensorrt": None, "tensorrt_rtx": ""}, None)
    assert str(err.value) == ("neither tensorrt nor tensorrt_rtx imports here; install the serving toolchain, or pass "
                              "--toolchain tensorrt-11.4.0.106 (say) to pull for another host")


def test_the_plan_lands_where_asked_named_after_the_model_by_default(farm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    got = pull_release(farm.store, "enc", "rtx-4090", [TC], progress=seen.append)
    assert got.plan.resolve() == (tmp_path / "enc.plan").resolve()
    assert got.manifest_path.name == "enc.plan.manifest.json"
    assert got.bytes == (tmp_path / "enc.plan").stat().st_size == json.loads(got.manifest_path.read_bytes())[
        "plan"]["bytes"]
    assert sum(seen) == got.bytes  # the progress callback saw every byte
    assert got.verdict.ok is None and got.release.claim is None  # no trusted keys: unsigned-checked, said so
    (tmp_path / "mlp-host").mkdir()
    mlp = pull_release(farm.store, "mlp", "rtx-4090", [TC], tmp_path / "mlp-host")
    assert mlp.plan == tmp_path / "mlp-host" / "mlp.plan" and mlp.pointer_key == layout.release_key("mlp", "rtx-4090",
                                                                                                     TC)


def test_a_plan_whose_serving_image_carries_another_tensorrt_is_refused_before_download(farm, tmp_path):
    declared = REFIT_FLEET.replace('rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}',
                                   'rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116", serving_images: '
                                   '[{image: "serve:1.6", tensorrt_version: "1.6.0.5"}]}')
    (tmp_path / "declared.yaml").write_text(declared)
    with pytest.raises(ServingImageMismatch, match="built with tensorrt_rtx 1.7.1.116, but its serving image "
                                                   "serve:1.6 carries tensorrt_rtx 1.6.0.5"):
        pull_release(farm.store, "enc", "rtx-4090", [TC], tmp_path / "host" / "enc.plan",
                     fleet=load_fleet(tmp_path / "declared.yaml"))
    assert not (tmp_path / "host").exists()
    fine = declared.replace('tensorrt_version: "1.6.0.5"', 'tensorrt_version: "1.7.1"')
    (tmp_path / "fine.yaml").write_text(fine)
    assert pull_release(farm.store, "enc", "rtx-4090", [TC], tmp_path / "ok.plan",
                        fleet=load_fleet(tmp_path / "fine.yaml")).bytes > 0


def test_an_unsigned_plan_is_refused_before_any_byte_with_the_fix(tmp_path):
    farm = Farm(tmp_path / "farm", signed=False)
    err = refused("unsigned release", "carries no signed release", farm.pull)
    assert "`trtfarm sign`" in str(err)
    refresh_release(farm.store, layout.release_key("enc", "rtx-4090", TC), farm.signer, reason="claim only")
    with pytest.raises(SignatureRefused) as err:  # the release is signed now, the plan folder still is not
        farm.pull()
    assert err.value.reason == "unsigned" and "`trtfarm sign`" in str(err.value)
    assert not (farm.root / "host").exists() and farm.memory.get(farm.store.uri, f"enc/rtx-4090/{TC}") is None


def test_a_plan_is_checked_against_the_digest_the_signature_covers_while_it_downloads(farm):
    enc, _ = farm.pointer()
    m = json.loads(farm.store.get(enc.manifest).data)
    farm.store.delete(m["plan"]["key"])
    farm.store.put_if_absent(m["plan"]["key"], farm.store.get(farm.pointer("mlp")[0].plan_key).data)
    with pytest.raises(IntegrityError):
        farm.pull()
    assert not (farm.root / "host" / "enc.plan").exists()
    assert farm.memory.get(farm.store.uri, f"enc/rtx-4090/{TC}") is None  # nothing refused is remembered


def test_the_first_toolchain_released_for_this_gpu_is_pulled(farm):
    got = pull_release(farm.store, "enc", "rtx-3090", ["tensorrt-11.4.0.106", TC, "tensorrt_rtx-9.9"],
                       farm.root / "h" / "e.plan", trust=farm.trust)
    assert got.pointer_key == layout.release_key("enc", "rtx-3090", TC) and got.release.claim.exported_at == T1
    with pytest.raises(UserInputError) as err:
        pull_release(farm.store, "enc", "rtx-3090", ["tensorrt-11.4.0.106"], farm.root / "x.plan")
    assert str(err.value) == ("no released plan of 'enc' for GPU 'rtx-3090' with tensorrt-11.4.0.106. Released: "
                              f"rtx-3090 / {TC}, rtx-4090 / {TC}. Build it for this target, or release a built plan.")
    with pytest.raises(UserInputError) as err:
        pull_release(farm.store, "vit", "rtx-3090", [TC, "tensorrt-11.4.0.106"], farm.root / "x.plan")
    assert str(err.value) == (f"no released plan of 'vit' for GPU 'rtx-3090' with {TC} or tensorrt-11.4.0.106. 'vit' "
                              f"has no releases in {farm.store.uri} yet. Build it for this target, or release a "
                              "built plan.")
