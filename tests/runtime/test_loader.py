"""The loader refuses the wrong plan: another GPU, toolchain version, model, or a flipped byte. Real RTX plans."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.releases.moves import move_release
from trtfarm.runtime.loader import PlanMismatch, contexts_that_fit, load_plan, static_checks
from trtfarm.runtime.plan_files import manifest_beside
from trtfarm.runtime.pull import pull_release
from trtfarm.store import open_store

from ..conftest_builds import publish_export

RTX4090 = GpuScan((LocalGpu(0, "NVIDIA GeForce RTX 4090", "8.9", 24.0),), "580.0")
RTX3090 = GpuScan((LocalGpu(0, "NVIDIA GeForce RTX 3090", "8.6", 24.0),), "580.0")
H100 = GpuScan((LocalGpu(0, "NVIDIA H100 80GB HBM3", "9.0", 80.0),), "580.0")
RTX = {"tensorrt_rtx": "1.7.1.116", "tensorrt": None}


@pytest.fixture(scope="module")
def pulled(tmp_path_factory):
    """A store with two RTX targets released, and the rtx-4090 plan pulled to local disk."""
    from ..conftest import RTX_FLEET

    root = tmp_path_factory.mktemp("loader")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(RTX_FLEET)
    store = open_store((root / "store").as_uri())
    model, outcomes = publish_export(store, fleet, root / "export", 0, 1_700_000_000,
                                     ["rtx-4090-rtx1.7", "rtx3090-rtx1.7-o5"])
    from trtfarm.publishing.publish import read_manifest

    for o in outcomes.values():
        key = o.manifest.removeprefix(store.uri + "/")
        move_release(store, key, read_manifest(store, key), release_on="built", reason="test")
    got = pull_release(store, "encoder", "rtx-4090", ["tensorrt_rtx-1.7.1.116"], root / "host" / "encoder.plan")
    return store, model, got


def copy_pair(got, tmp_path):
    plan = tmp_path / "encoder.plan"
    shutil.copy(got.plan, plan)
    shutil.copy(got.manifest_path, manifest_beside(plan))
    return plan


def refusal(plan, **kw):
    with pytest.raises(PlanMismatch) as err:
        load_plan(plan, **kw)
    return str(err.value)


def test_the_right_plan_passes_every_check_without_a_gpu(pulled):
    _, model, got = pulled
    checks = static_checks(got.plan, model_manifest(got), expected_onnx_digest=model.onnx_digest, installed=RTX,
                           gpus=RTX4090)
    assert [(c.name, c.ok) for c in checks] == [("sha256", True), ("header", True), ("model", True),
                                                 ("toolchain", True), ("gpu", True)]
    assert static_checks(got.plan, model_manifest(got), installed=RTX, gpus=RTX3090)[-1].ok  # one RTX class


def model_manifest(got):
    from trtfarm.vocabulary.manifest import manifest_from_json

    return manifest_from_json(got.manifest_path.read_bytes())


def test_another_gpu_is_refused_naming_both(pulled):
    msg = refusal(pulled[2].plan, installed=RTX, gpus=H100)
    assert "plan is for NVIDIA GeForce RTX 4090" in msg and "this host has NVIDIA H100 80GB HBM3 (cc 9.0)" in msg
    assert "trtfarm pull" in msg


def test_another_toolchain_version_is_refused(pulled):
    msg = refusal(pulled[2].plan, installed={"tensorrt_rtx": "1.6.0.5"}, gpus=RTX4090)
    assert "plan needs tensorrt_rtx 1.7.1.116; installed: 1.6.0.5" in msg


def test_another_model_is_refused(pulled):
    msg = refusal(pulled[2].plan, expected_onnx_digest="f" * 64, installed=RTX, gpus=RTX4090)
    assert "expected onnx ffffffffffff" in msg


def test_a_flipped_byte_is_refused_by_sha256_and_a_flipped_header_by_the_header_check(pulled, tmp_path):
    plan = copy_pair(pulled[2], tmp_path)
    data = bytearray(plan.read_bytes())
    data[len(data) // 2] ^= 1
    plan.write_bytes(bytes(data))
    msg = refusal(plan, installed=RTX, gpus=RTX4090)
    assert "the file is damaged" in msg and "header" not in msg
    data[len(data) // 2] ^= 1
    data[25] = 9  # minor version byte: 1.9.1.116
    plan.write_bytes(bytes(data))
    msg = refusal(plan, installed=RTX, gpus=RTX4090)
    assert "header says tensorrt_rtx 1.9.1.116, the manifest says tensorrt_rtx 1.7.1.116" in msg


def test_when_every_check_passes_the_runtime_decides_and_its_reason_is_kept(pulled):
    msg = refusal(pulled[2].plan, installed=RTX, gpus=RTX4090)  # no GPU/driver on this machine
    assert "header check refused it, so it was not deserialised" in msg and "get_engine_validity: INVALID" in msg
    # the runtime's own words ("CUDA driver version is insufficient") reach the refusal in a process whose first use
    # of TensorRT is not a build (TensorRT keeps the first logger for good, and this test process built the plans):
    # a serving host's, as `trtfarm verify` on the pulled plan shows
    done = subprocess.run([sys.executable, "-m", "trtfarm", "verify", str(pulled[2].plan)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and "CUDA driver version is insufficient" in done.stdout + done.stderr, done


def test_pull_picks_the_plan_of_the_asked_gpu_among_several(pulled, tmp_path):
    store, _, got4090 = pulled
    got3090 = pull_release(store, "encoder", "rtx-3090", ["tensorrt_rtx-1.7.1.116"], tmp_path / "e.plan")
    m3090, m4090 = (model_manifest(g) for g in (got3090, got4090))
    assert m3090.target.gpu == "rtx-3090" and m3090.build.settings["optimization_level"] == 5
    assert m4090.target.gpu == "rtx-4090" and m3090.build.build_digest != m4090.build.build_digest
    assert "/rtx-3090/" in m3090.plan.key and "/rtx-4090/" in m4090.plan.key


def test_pull_without_a_release_for_this_machine_says_which_exist(pulled, tmp_path):
    from trtfarm.errors import UserInputError

    with pytest.raises(UserInputError, match=r"no released plan of 'encoder' for GPU 'h100'.*Released: "
                                             r"rtx-3090 / tensorrt_rtx-1.7.1.116, rtx-4090"):
        pull_release(pulled[0], "encoder", "h100", ["tensorrt-11.4.0.106"], tmp_path / "x.plan")
    assert not (tmp_path / "x.plan").exists()


def test_context_pool_sizing_follows_memory_and_traffic():
    assert contexts_that_fit(10_000, [1000, 4000], [0.9, 0.1], reserve_fraction=0.0) == [5, 1]
    with pytest.raises(Exception, match="one context per profile needs"):
        contexts_that_fit(4000, [1000, 4000])
