"""Every "not found" names the nearest valid thing, and a YAML error its own line: a person's typos, run as commands.

A folder holding model.onnx, a misspelt file, target, GPU, model and fleet key: each is one line (exit 2) that names
what was meant. The store is real (the encoder built with TensorRT-RTX and released), the fleet files are the
repository's own with one key changed.
"""

from __future__ import annotations

import pytest

from trtfarm.store import open_store

from .conftest import REPO
from .conftest_builds import publish_export
from .test_signing import RELEASED_FLEET, trtfarm

FLEET = (REPO / "gpu_targets.yaml").read_text()


def _one_line(done) -> str:
    lines = [x for x in done.stderr.splitlines() if x.strip() and "built-in fleet" not in x]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A folder with the encoder's export folder and a file store with it released for the RTX 4090."""
    root = tmp_path_factory.mktemp("nearest")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    store = open_store((root / "store").as_uri())
    publish_export(store, fleet, root / "encoder", 0, 1_700_000_000, ["rtx-4090-rtx1.7"])
    return root


def test_a_folder_or_a_misspelt_file_names_the_model_onnx_meant(released):
    said = _one_line(trtfarm("build", "encoder", "--store", "store", cwd=released))
    assert said.endswith("is a folder, not an ONNX file; build encoder/model.onnx"), said
    for typo in ("encodr", "encoder/modle.onnx"):
        said = _one_line(trtfarm("build", typo, "--store", "store", cwd=released))
        assert said.endswith("no such ONNX file; did you mean encoder/model.onnx?"), said


def test_a_misspelt_target_gpu_or_model_names_the_nearest_and_the_known_ones(released):
    said = _one_line(trtfarm("build", "encoder/model.onnx", "--target", "rtx-4090-rtx17", "--store", "store",
                             cwd=released))
    assert "did you mean 'rtx-4090-rtx1.7'?" in said and "known targets:" in said, said
    said = _one_line(trtfarm("pull", "encoder", "--gpu", "rtx4090", "--to", "x.plan", "--store", "store",
                             cwd=released))
    assert "did you mean 'rtx-4090'?" in said and "known GPUs:" in said, said
    said = _one_line(trtfarm("triton", "encodr", "--repo", "repo", "--gpu", "rtx-4090", "--store", "store",
                             cwd=released))
    assert "did you mean 'encoder'?" in said and "known models: encoder" in said, said


@pytest.mark.parametrize("typo, meant, holder, key", [
    ("  workspace_mib: 4096", "workspace_mib", "defaults", "workspace_mb"), ("gpus:", "gpus", "", "gpu"),
    ("    memory_gib: 80", "memory_gib", "gpus.h100", "memory_gb"),
])
def test_a_misspelt_fleet_key_is_named_at_its_own_line_with_the_key_meant(tmp_path, typo, meant, holder, key):
    """One line each: ``gpu:`` for the required ``gpus:`` is said at ``gpu:``'s line, not as a missing key."""
    wrong = typo.replace(meant, key)
    assert FLEET.count(f"\n{typo}\n") == 1
    text = FLEET.replace(f"\n{typo}\n", f"\n{wrong}\n")
    (tmp_path / "gpu_targets.yaml").write_text(text)
    line = text.splitlines().index(wrong) + 1
    said = _one_line(trtfarm("targets", cwd=tmp_path))
    assert f"gpu_targets.yaml:{line}: {holder + '.' if holder else ''}{key}: unknown key; did you mean " \
           f"'{meant}'?" in said, said
