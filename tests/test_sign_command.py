"""``trtfarm sign`` as a person runs it: on a real store of real TensorRT-RTX plans (file:// and moto's S3).

A typo in a model name is bad input naming the known models; a plan deleted by hand is named and left unsigned while
every sound plan and release is signed (exit 1 with the count); and ``sign`` says nothing about the fleet it does not
use.
"""

from __future__ import annotations

import pytest

from trtfarm import layout
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import read_pointer
from trtfarm.store import open_store

from .conftest_builds import publish_export
from .test_signing import RELEASED_FLEET, TOOLCHAIN, key_pair, trtfarm

TARGET, GPU = "rtx-4090-rtx1.7", "rtx-4090"
MODELS = ("encoder", "enc2")


@pytest.fixture
def unsigned(store_uri, tmp_path):
    """Two models built and released without a key, a worker key, and a folder with no gpu_targets.yaml."""
    fleet = tmp_path / "fleet" / "gpu_targets.yaml"
    fleet.parent.mkdir()
    fleet.write_text(RELEASED_FLEET)
    store = open_store(store_uri)
    manifests = {}
    for seed, name in enumerate(MODELS):
        _, outcomes = publish_export(store, fleet, tmp_path / f"e{seed}", seed, 1_700_000_000, [TARGET], name=name)
        assert outcomes[TARGET].release.action == "moved"
        manifests[name] = outcomes[TARGET].manifest.removeprefix(store.uri + "/")
    private, _ = key_pair(tmp_path, "worker")
    here = tmp_path / "elsewhere"
    here.mkdir()
    return {"store": store, "manifests": manifests, "env": {"TRTFARM_SIGNING_KEY": str(private)}, "cwd": here}


def _sign(farm, *args: str):
    return trtfarm("sign", *args, "--store", farm["store"].uri, env=farm["env"], cwd=farm["cwd"])


def _signed(farm, model: str) -> tuple[bool, bool]:
    """(the model's plan folder is signed, its release carries a claim)."""
    store = farm["store"]
    plan = read_stored(store, farm["manifests"][model]).signature is not None
    pointer, _ = read_pointer(store, layout.release_key(model, GPU, TOOLCHAIN))
    return plan, pointer.claim is not None


def test_an_unknown_model_is_bad_input_naming_the_known_ones(unsigned):
    done = _sign(unsigned, "encoder", "encc")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "'encc'" in lines[0] and "known models: enc2, encoder" in lines[0] and "did you mean" in lines[0]
    assert "Traceback" not in done.stderr and "built-in fleet" not in done.stderr
    assert _signed(unsigned, "encoder") == (False, False)  # refused before anything is signed


def test_a_deleted_plan_is_named_and_everything_sound_is_still_signed(unsigned):
    store = unsigned["store"]
    lost = layout.plan_key(layout.folder_of(unsigned["manifests"]["enc2"]))
    store.delete(lost)
    done = _sign(unsigned)
    assert done.returncode == 1, done.stderr
    assert _signed(unsigned, "encoder") == (True, True)
    assert _signed(unsigned, "enc2") == (False, False)
    assert "1 plan(s) and 1 release(s) signed, 0 already signed, 2 refused" in done.stdout
    [line] = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("error: 2 refused") and store.url(lost) in line and "missing" in line, done.stderr
    assert "built-in fleet" not in done.stderr and "Traceback" not in done.stderr
    again = _sign(unsigned, "encoder")  # the sound model alone: nothing left to sign, nothing refused
    assert again.returncode == 0 and "0 plan(s) and 0 release(s) signed, 1 already signed, 0 refused" in again.stdout
