"""`trtfarm init` fits the project it runs in and keeps what is there: run it as often as you like."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from trtfarm.project.init_files import farm_yaml
from trtfarm.vocabulary.buildspec import BuildSpec

from . import forkcli
from .conftest import REPO
from .models import write_small_cnn

TRTFARM = [sys.executable, "-m", "trtfarm"]
TEMPLATE = (REPO / "trtfarm/templates/farm.yaml").read_text()


def cli(args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    return forkcli.trtfarm(args, cwd=cwd, env={**env, "COLUMNS": "200"}, timeout=600)


def test_with_no_model_farm_yaml_is_the_template_with_its_examples_commented():
    assert farm_yaml(TEMPLATE, None) == TEMPLATE
    assert "profiles" not in (yaml.safe_load(TEMPLATE) or {})  # no encoder profiles for a model that is not it


def test_a_static_model_gets_no_profiles_and_its_folders_name(tmp_path):
    model = write_small_cnn(tmp_path / "detector" / "model.onnx")
    text = farm_yaml(TEMPLATE, model)
    spec = BuildSpec.model_validate(yaml.safe_load(text))
    assert spec.name == "detector" and not spec.profiles and "inputs are all static (x (1x3x32x32))" in text


def test_a_dynamic_models_example_names_its_inputs_and_builds_once_uncommented(tmp_path):
    model = write_small_cnn(tmp_path / "proj" / "model.onnx", batch="N")
    text = farm_yaml(TEMPLATE, model)
    assert "dynamic inputs: x (Nx3x32x32)" in text and not BuildSpec.model_validate(yaml.safe_load(text)).profiles
    example = "\n".join(line[2:] if line.startswith(("# profiles:", "#   ")) else line for line in text.splitlines()
                        if "profiles.yaml" not in line)
    spec = BuildSpec.model_validate(yaml.safe_load(example))
    assert [p.root["x"].text() for p in spec.profiles] == ["1x3x32x32:8x3x32x32:32x3x32x32"]
    (tmp_path / "proj/farm.yaml").write_text(example)
    built = cli(["build", "model.onnx", "--target", "rtx-4090-rtx1.7"], tmp_path / "proj")
    assert built.returncode == 0, built.stderr[-2000:]


def test_a_dynamic_model_without_profiles_is_one_line_exit_2(tmp_path):
    write_small_cnn(tmp_path / "model.onnx", batch="N")
    done = cli(["build", "model.onnx"], tmp_path)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "'x' (?x3x32x32)" in errors[0] and "--profile x=MIN:OPT:MAX" in errors[0]
    assert not (tmp_path / "trtfarm-store").exists()


@pytest.mark.integration
def test_init_twice_in_a_project_of_another_model_keeps_everything_and_the_build_still_works(tmp_path):
    project = tmp_path / "myproject"
    write_small_cnn(project / "model.onnx")
    for run in range(2):
        done = cli(["init"], project)
        assert done.returncode == 0, done.stderr
        assert ("wrote" if run == 0 else "kept") in done.stdout
        built = cli(["build", "model.onnx"], project)
        assert built.returncode == 0, built.stderr[-2000:]
    assert done.stdout.count("kept") == 4 and "nothing written" in done.stdout
    assert yaml.safe_load((project / "farm.yaml").read_text())["name"] == "myproject"


def test_init_into_a_file_or_a_read_only_folder_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("x")
    done = cli(["init", "a-file"], tmp_path)
    assert done.returncode == 2 and done.stderr.count("error:") == 1 and "is a file, not a folder" in done.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], check=True)
    try:
        done = cli(["init", "ro/project"], tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert "read-only file system" in done.stderr and "Traceback" not in done.stderr


def test_init_says_what_it_did_with_farm_yaml_and_which_model_to_build(tmp_path):
    write_small_cnn(tmp_path / "project" / "detector.onnx")
    here = " ".join(cli(["init"], tmp_path / "project").stdout.split())
    assert "farm.yaml (already beside detector.onnx, fitted to it)" in here and "next to your" not in here, here
    assert here.endswith("then trtfarm build detector.onnx."), here
    (tmp_path / "project" / "prefect.yaml").unlink()  # written again; farm.yaml kept: no claim it was written
    kept = " ".join(cli(["init", "project"], tmp_path).stdout.split())
    assert "and farm.yaml, then trtfarm build project/detector.onnx." in kept and "fitted" not in kept, kept
    empty = " ".join(cli(["init", "empty"], tmp_path).stdout.split())  # no model here: where farm.yaml goes
    assert "put farm.yaml next to your model.onnx, then trtfarm build model.onnx." in empty, empty
