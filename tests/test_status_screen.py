"""``status`` and ``plan`` as a person reads them in a terminal of 80 columns (tmux's own screen), issue 59.

Three models built with the repository's fleet on a machine without TensorRT: each misses its 4 TensorRT targets,
which the latest run skipped, each reason ending in the same install hint but for its version. The hint is printed
once, under the blocks, with ``VERSION`` where the versions differ; each cell keeps its version. Notes under
``plan``'s table that wrap keep their indent (the README's rule).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from trtfarm.cli.status_view import SharedFixes

from .conftest import REPO
from .test_screens_tmux import on_tmux, unindented_continuations

MODELS = ("alpha", "beta", "a-model-whose-name-is-long-enough-to-wrap-its-notes")
HINT = "on a GPU host (pip downloads NVIDIA's libraries)"


@pytest.fixture(scope="module")
def three_models(tmp_path_factory, example_dir):
    """The repository's fleet and the example built under three names; a proposed fleet that changes a setting."""
    folder = tmp_path_factory.mktemp("status-screen")
    fleet = (REPO / "gpu_targets.yaml").read_text()
    (folder / "gpu_targets.yaml").write_text(fleet)
    assert "optimization_level: 3" in fleet
    (folder / "proposed.yaml").write_text(fleet.replace("optimization_level: 3", "optimization_level: 4"))
    shutil.copytree(example_dir, folder / "encoder")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    for name in MODELS:
        subprocess.run([sys.executable, "-m", "trtfarm", "build", "encoder/model.onnx", "--name", name], cwd=folder,
                       env=env, capture_output=True, text=True, timeout=600, check=True)
    return folder


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is Debian's package tmux")
def test_status_of_three_models_with_missing_targets_holds_one_hint_at_80_columns(three_models):
    screen = on_tmux(["status"], three_models, 80)
    lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
    assert "Traceback" not in screen and "error:" not in screen, screen
    assert max(map(len, lines)) <= 80 and unindented_continuations(screen) == [], screen
    assert screen.count("pip downloads NVIDIA's") == 1, screen
    hint = " ".join(screen.split("fix: ", 1)[1].split())
    assert hint.startswith("install tensorrt==VERSION " + HINT) and "(VERSION: the one each names)" in hint, hint
    for version in ("11.4.0.106", "10.16.1.11"):  # each cell still names what is missing, with its version
        assert " ".join(screen.split()).count(f"tensorrt {version} is not installed here (fix below)") == 6, screen
    assert len(lines) <= 40, screen  # 59 before (the store path wraps the first line): the hint in each of 12 cells


@pytest.mark.integration
def test_status_in_a_pipe_says_the_hint_once_too(three_models):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}, "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "status"], cwd=three_models, env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    assert done.stdout.count(HINT) == 1, done.stdout
    assert done.stdout.count("of 3 models (") == 4, done.stdout  # a line per target, its models grouped


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is Debian's package tmux")
def test_whatif_notes_that_wrap_keep_their_indent_at_80_columns(three_models):
    screen = on_tmux(["whatif", "--fleet", "proposed.yaml"], three_models, 80)
    assert f"\n  {MODELS[2]}/h100-trt11.4: not built" in screen, screen
    assert unindented_continuations(screen) == [], screen


FIX = "install tensorrt==VERSION on a GPU host (pip downloads NVIDIA's libraries), or use NVIDIA's TensorRT " \
      "container of that version"


def _skipped(version: str) -> str:
    return f"skipped by the latest run: tensorrt {version} is not installed here; {FIX.replace('VERSION', version)}"


def test_a_fix_that_ends_one_reason_only_stays_in_it():
    fixes = SharedFixes.of([_skipped("11.4.0.106"), "no plan released for this target"])
    assert fixes.fixes == {} and fixes.short(_skipped("11.4.0.106")) == _skipped("11.4.0.106")


def test_a_fix_two_reasons_share_is_pointed_at():
    fixes = SharedFixes.of([_skipped("11.4.0.106"), _skipped("11.4.0.106"), "a newer export; builder setting: x"])
    assert fixes.short(_skipped("11.4.0.106")) == \
        "skipped by the latest run: tensorrt 11.4.0.106 is not installed here (fix below)"
    assert fixes.short("a newer export; builder setting: x") == "a newer export; builder setting: x"
    assert list(fixes.fixes.values()) == [[FIX.replace("VERSION", "11.4.0.106")] * 2]
