"""The wheel as a pip user installs it (not editable), into a fresh venv, in a folder outside the repository.

The base install serves a host that pulls and verifies plans and loads them with ``trtfarm.runtime``: no torch, no
Prefect. The [rtx] extra adds the toolchain, and ``trtfarm build model.onnx`` then builds in a project folder: the
README.md block "Your own project" runs here as written.
pip's cache (or the machine's wheel folder) makes the installs take seconds. The base install is made once for the
module: its tests run commands in it and change nothing installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from .conftest import REPO

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    from .docrun import session_wheel

    return session_wheel(tmp_path_factory)  # the session's: the docs' blocks install the same one


@pytest.fixture(scope="module")
def base_venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed as a pip user installs it (no extra)."""
    folder = tmp_path_factory.mktemp("base-install")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    run(venv, [str(venv / "bin/pip"), "install", "-q", str(wheel)], folder)
    return venv


def run(venv, args, cwd, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_the_wheel_carries_the_templates_and_the_local_farm_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"trtfarm/templates/gpu_targets.yaml", "trtfarm/templates/farm.yaml", "trtfarm/templates/prefect.yaml",
            "trtfarm/templates/local-farm/postgres.sh", "flows/build_matrix.py"} <= names


def test_a_base_install_pulls_verifies_and_loads_with_neither_torch_nor_prefect(base_venv, tmp_path, example_dir):
    # a plan to pull, built by the development install into a store the fresh one reads
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-m", "trtfarm", "build", str(example_dir / "model.onnx"), "--store", str(store),
                    "--targets-file", str(REPO / "gpu_targets.yaml"), "--target", "rtx-4090-rtx1.7"], check=True,
                   capture_output=True, cwd=tmp_path)
    venv = base_venv
    installed = {line.split("==")[0].lower() for line in run(venv, [str(venv / "bin/pip"), "freeze"],
                                                              tmp_path).stdout.splitlines()}
    assert not installed & {"torch", "prefect", "nvidia-modelopt", "onnxruntime", "matplotlib", "tensorrt-rtx-cu13"}

    host = tmp_path / "host"
    host.mkdir()
    trtfarm = str(venv / "bin/trtfarm")
    pulled = run(venv, [trtfarm, "pull", "encoder", "--store", str(store), "--gpu", "rtx-4090", "--toolchain",
                        "tensorrt_rtx-1.7.1.116", "--to", "enc.plan", "--json"], host)
    assert json.loads(pulled.stdout)["bytes"] > 0
    verified = run(venv, [trtfarm, "verify", "enc.plan", "--json"], host, check=False)
    assert verified.returncode == 1 and "Traceback" not in verified.stderr  # no toolchain, no GPU here: it says so
    checks = {c["check"]: c["ok"] for c in json.loads(verified.stdout)["checks"]}
    assert checks["sha256"] and checks["header"] and not checks["toolchain"]
    loaded = run(venv, [str(venv / "bin/python"), "-c", "import sys; from trtfarm.runtime import load_plan, Router; "
                        "import trtfarm.cli.main; print(sorted(m for m in ('torch', 'prefect', 'onnxruntime') "
                        "if m in sys.modules))"], host)
    assert loaded.stdout.strip() == "[]"
    farm = run(venv, [trtfarm, "pools", "sync"], host, check=False)
    assert farm.returncode == 2 and "pip install 'trtfarm[farm]'" in farm.stderr and "Traceback" not in farm.stderr
    assert [line for line in farm.stderr.splitlines() if "error" in line] == [
        "error: prefect is not installed (the farm commands): pip install 'trtfarm[farm]' (or 'trtfarm[all]' for "
        "everything)"]


def test_in_a_base_install_each_command_names_the_extra_the_readme_table_gives_it(base_venv, tmp_path,
                                                                                 example_dir):
    """The README's "What to install" table is the referee: a command of an extra's row, run in a base install, says
    in one line (exit 2) to install that extra."""
    import re

    readme = (REPO / "README.md").read_text().split("## What to install", 1)[1].split("Each row is", 1)[0]
    rows = {m.group(1): re.findall(r"`([a-z][a-z ]*)`", m.group(2).split(":", 1)[1])
            for m in re.finditer(r"^\| `trtfarm\[(\w+)\]` \| ([^|]*) \|", readme, re.M) if ":" in m.group(2)}
    venv = base_venv
    (tmp_path / "s.jsonl").write_text('{"x": [1, 2]}\n')
    args = {"webhook serve": [], "triton": ["encoder", "--repo", "repo"], "precision": [
        str(example_dir / "model.onnx"), "--mode", "fp16"], "profiles derive": ["s.jsonl"], "pools": ["sync"],
        "farm": ["run", "encoder"], "images": ["build"]}
    checked = 0
    for extra, commands in rows.items():
        for command in commands:
            if command not in args:
                continue
            done = run(venv, [str(venv / "bin/trtfarm"), *command.split(), *args[command]], tmp_path, check=False)
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            assert done.returncode == 2 and len(errors) == 1, (command, done.stderr[-2000:])
            assert f"pip install 'trtfarm[{extra}]'" in errors[0], (command, extra, errors[0])
            checked += 1
    assert checked >= 7, rows
