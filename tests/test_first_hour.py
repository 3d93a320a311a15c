"""A pip user's first hour: start in any folder, `trtfarm init`, and trial builds that leave releases alone."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from trtfarm.project.builtin_fleet import template_fleet
from trtfarm.project.fleet_file import BUILTIN_FLEET, load_fleet
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.machine_fleet import gpu_key, machine_fleet

from . import forkcli
from .conftest import REPO

TRTFARM = [sys.executable, "-m", "trtfarm"]


def cli(args, cwd, check=True):
    env = {**os.environ, "PREFECT_HOME": str(cwd / ".prefect"), "COLUMNS": "200"}
    env.pop("TRTFARM_TARGETS", None)
    env.pop("TRTFARM_STORE", None)
    proc = forkcli.trtfarm(args, cwd=cwd, env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def pointer(folder, gpu="rtx-4090"):
    return json.loads((folder / f"trtfarm-store/releases/encoder/{gpu}/tensorrt_rtx-1.7.1.116.json").read_text())


def test_with_no_gpu_the_built_in_fleet_is_the_portable_rtx_targets():
    fleet = machine_fleet([], {"tensorrt_rtx": "1.7.1.116", "tensorrt": None}, template_fleet())
    targets = select_targets(fleet)
    assert [t.id for t in targets] == ["rtx-4090-rtx1.7", "rtx-5090-rtx1.7"]
    assert {t.compat_class for t in targets} == {"rtx-portable"} and {t.release_on for t in targets} == {"built"}


def test_the_built_in_fleet_has_this_machines_gpus_and_toolchains():
    h100 = ("NVIDIA H100 80GB HBM3", "9.0", 79.6)
    fleet = machine_fleet([h100, h100, ("NVIDIA GeForce RTX 4090", "8.9", 23.5)],
                          {"tensorrt": "10.16.1.11", "tensorrt_rtx": None}, template_fleet())
    ids = [t.id for t in fleet.targets]
    assert ids == ["h100-trt10.16", "rtx-4090-rtx1.7", "rtx-4090-trt10.16"]  # the fleet template's GPU keys
    assert fleet.gpus["h100"].count == 2 and fleet.gpus["h100"].compute_capability == "9.0"
    assert fleet.gpus["h100"].pool == "gpu-h100"  # the template's pool, so `trtfarm worker --pool` agrees
    assert fleet.toolchains["rtx-1.7"].version == "1.7.1.116"  # not installed: the [rtx] extra's, so targets says how
    no_trt = machine_fleet([h100], {"tensorrt": None, "tensorrt_rtx": "1.7.1.116"},
                           template_fleet())
    assert [t.id for t in no_trt.targets] == ["h100-trt11.4"]  # no RTX plan runs on a 9.0 GPU
    named = {n: gpu_key(n, template_fleet()) for n in ("NVIDIA L4", "NVIDIA GeForce RTX 5090", "NVIDIA H200",
                                                       "NVIDIA A100-SXM4-80GB")}
    assert named == {"NVIDIA L4": "l4", "NVIDIA GeForce RTX 5090": "rtx-5090", "NVIDIA H200": "h200",
                     "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb"}


def test_an_explicit_fleet_file_that_is_missing_names_init(tmp_path):
    with pytest.raises(Exception, match="trtfarm init"):
        load_fleet(tmp_path / "gpu_targets.yaml")
    assert select_targets(load_fleet(BUILTIN_FLEET))  # this machine always has a target


@pytest.mark.integration
def test_build_in_an_empty_folder_uses_the_built_in_fleet_then_init_writes_the_fleet(tmp_path, example_dir):
    shutil.copy(example_dir / "model.onnx", tmp_path / "model.onnx")
    shutil.copy(example_dir / "farm.yaml", tmp_path / "farm.yaml")
    built = cli(["build", "model.onnx", "--json"], tmp_path)
    assert built.stderr.count("built-in fleet") == 1, built.stderr
    assert {r["status"] for r in json.loads(built.stdout)} == {"built"}

    written = cli(["init"], tmp_path)  # the model's own farm.yaml is kept
    for name in ("gpu_targets.yaml", "prefect.yaml", "local-farm/postgres.sh"):
        assert f"wrote {name}" in written.stdout
    assert "kept farm.yaml" in written.stdout and (tmp_path / "farm.yaml").read_text() == \
        (example_dir / "farm.yaml").read_text()
    assert (tmp_path / "gpu_targets.yaml").read_text() == (REPO / "gpu_targets.yaml").read_text()
    assert (tmp_path / "prefect.yaml").read_text() == (REPO / "prefect.yaml").read_text()
    assert os.access(tmp_path / "local-farm/postgres.sh", os.X_OK)
    targets = json.loads(cli(["targets", "--json"], tmp_path).stdout)["targets"]
    assert [t["target"] for t in targets][:2] == ["h100-trt11.4", "h100-trt10.16"]  # the written fleet

    again = cli(["init"], tmp_path)  # it keeps what is there, as often as it runs
    assert again.stdout.count("kept") == 4 and "nothing written" in again.stdout
    (tmp_path / "farm.yaml").write_text("name: mine\n")
    cli(["init", "--force"], tmp_path)
    assert "precision: fp32" in (tmp_path / "farm.yaml").read_text()


@pytest.mark.integration
def test_a_trial_build_of_another_recipe_leaves_the_release_pointer_where_it_was(tmp_path, example_dir):
    shutil.copytree(example_dir, tmp_path / "encoder")  # farm.yaml: precision fp32
    shutil.copy(REPO / "gpu_targets.yaml", tmp_path / "gpu_targets.yaml")
    first = json.loads(cli(["build", "encoder/model.onnx", "--target", "rtx-4090-rtx1.7", "--json"], tmp_path).stdout)
    released = pointer(tmp_path)
    assert first[0]["release"].startswith("released: releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json: "
                                          "nothing -> encoder/rtx-4090/")

    trial = cli(["build", "encoder/model.onnx", "--target", "rtx-4090-rtx1.7", "--precision", "fp16"], tmp_path)
    assert pointer(tmp_path) == released  # the pointer, its history included, did not move
    assert "not released, trial build: fp16, the model's recipe is fp32 (farm.yaml's)" in trial.stdout
    old = released["manifest"].split("/")[-2]
    assert f"releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json: encoder/rtx-4090/{old}" in trial.stdout
    plans = cli(["plans"], tmp_path).stdout
    fp32_row = next(line for line in plans.splitlines() if "fp32" in line)
    fp16_row = next(line for line in plans.splitlines() if "fp16" in line)
    assert "yes" in fp32_row and "yes" not in fp16_row

    moved = cli(["build", "encoder/model.onnx", "--target", "rtx-4090-rtx1.7", "--precision", "fp16", "--release"],
                tmp_path)
    now = pointer(tmp_path)
    assert now["manifest"] != released["manifest"] and now["history"][-2]["manifest"] == released["manifest"]
    assert f"released: encoder/rtx-4090 tensorrt_rtx-1.7.1.116: {old} -> {now['manifest'].split('/')[-2]}" \
        in moved.stdout.replace("\n", " ")


@pytest.mark.integration
def test_int8_without_calibration_names_a_build_option_that_exists(tmp_path, example_dir):
    shutil.copytree(example_dir, tmp_path / "encoder")
    refused = cli(["build", "encoder/model.onnx", "--precision", "int8"], tmp_path, check=False)
    assert refused.returncode == 2 and "pass --calibration calib.npz" in refused.stderr, refused.stderr
    assert "--calibration" in cli(["build", "--help"], tmp_path).stdout
    missing = cli(["build", "encoder/model.onnx", "--precision", "int8", "--calibration", "nope.npz"], tmp_path,
                  check=False)
    assert missing.returncode == 2 and "'--calibration': file 'nope.npz' does not exist" in missing.stderr
