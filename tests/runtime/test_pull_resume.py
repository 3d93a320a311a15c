"""A pull killed mid-download leaves one part file named for its destination, which the next pull resumes with a
ranged read (or starts over, saying so) and removes; nothing else is ever left beside ``--to``.

What a SIGKILL leaves is the bytes written so far: the tests write that part file as such a pull leaves it, then pull
again against the real file store and moto's S3 server (ranged GETs included)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from trtfarm.publishing.publish import read_manifest
from trtfarm.releases.moves import move_release
from trtfarm.runtime.pull import pull_release
from trtfarm.store import open_store
from trtfarm.store.resume import part_path

from ..conftest import RTX_FLEET
from ..conftest_builds import publish_export

RTX = ["tensorrt_rtx-1.7.1.116"]


@pytest.fixture
def released(store_uri, tmp_path):
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RTX_FLEET)
    store = open_store(store_uri)
    _, outcomes = publish_export(store, fleet, tmp_path / "export", 0, 1_700_000_000, ["rtx-4090-rtx1.7"])
    key = outcomes["rtx-4090-rtx1.7"].manifest.removeprefix(store.uri + "/")
    manifest = read_manifest(store, key)
    move_release(store, key, manifest, release_on="built", reason="test")
    plan = store.get(manifest.plan.key).data
    return store, manifest, plan


def beside(dest):
    return sorted(p.name for p in dest.parent.iterdir())


def leftovers(dest):
    """Everything beside the plan that is not the plan or its attestations (manifest, provenance, signature)."""
    return [n for n in beside(dest) if not (n == dest.name or n.startswith(f"{dest.name}.") and n.endswith(".json")
                                            or n.endswith(".sig"))]


def test_a_killed_pulls_part_is_resumed_with_a_ranged_read_and_nothing_is_left(released, tmp_path):
    store, manifest, plan = released
    dest = tmp_path / "host" / "enc.plan"
    dest.parent.mkdir()
    part = part_path(dest, manifest.plan.sha256)
    part.write_bytes(plan[: len(plan) // 3])  # what the killed pull had written
    got = pull_release(store, "encoder", "rtx-4090", RTX, dest)
    assert got.transfer == f"resumed a killed download at {len(plan) // 3:,} bytes"
    assert dest.read_bytes() == plan and got.bytes == len(plan)
    assert leftovers(dest) == [] and dest.name in beside(dest)  # no part, no .tmp-*


def test_a_part_of_another_plan_is_removed_and_the_pull_starts_afresh(released, tmp_path):
    store, manifest, plan = released
    dest = tmp_path / "enc.plan"
    stale = part_path(dest, hashlib.sha256(b"an older release").hexdigest())
    stale.write_bytes(b"x" * 1000)
    got = pull_release(store, "encoder", "rtx-4090", RTX, dest)
    assert "a partial download of another plan" in got.transfer and dest.read_bytes() == plan
    assert not stale.exists() and not list(tmp_path.glob(".*part"))


def test_a_part_that_does_not_match_is_refused_and_the_next_pull_succeeds(released, tmp_path):
    store, manifest, plan = released
    dest = tmp_path / "enc.plan"
    part = part_path(dest, manifest.plan.sha256)
    part.write_bytes(b"\0" * 100)  # damaged: bytes the object does not have
    with pytest.raises(Exception, match="does not match"):
        pull_release(store, "encoder", "rtx-4090", RTX, dest)
    assert not dest.exists() and not part.exists()  # the bad part is gone with the refusal
    assert pull_release(store, "encoder", "rtx-4090", RTX, dest).transfer == ""
    assert dest.read_bytes() == plan


class WholeObjectStore:
    """A store that answers a ranged read with the whole object (some S3-compatible servers do)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def read_from(self, key, offset):
        stream, _ = self._inner.read_from(key, 0)
        return stream, False


def test_a_store_without_ranged_reads_starts_over_and_says_so(released, tmp_path):
    store, manifest, plan = released
    dest = tmp_path / "enc.plan"
    part_path(dest, manifest.plan.sha256).write_bytes(plan[:100])
    got = pull_release(WholeObjectStore(store), "encoder", "rtx-4090", RTX, dest)
    assert "started over" in got.transfer and dest.read_bytes() == plan


@pytest.mark.parametrize("store_uri", ["file"], indirect=True)
def test_a_pull_killed_at_any_moment_leaves_at_most_its_part_and_the_next_pull_cleans_up(released, tmp_path):
    store, manifest, plan = released
    host = tmp_path / "host"
    host.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    pull = [sys.executable, "-m", "trtfarm", "pull", "encoder", "--store", store.uri, "--gpu", "rtx-4090",
            "--toolchain", RTX[0], "--targets-file", str(tmp_path / "gpu_targets.yaml"), "--to", "enc.plan"]
    for delay in (0.3, 0.6, 0.9, 1.2):  # wherever it is when killed (starting, downloading, writing, done)
        proc = subprocess.Popen(pull, cwd=host, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = leftovers(host / "enc.plan")
        assert all(n == part_path(host / "enc.plan", manifest.plan.sha256).name for n in left), left
    done = subprocess.run(pull, cwd=host, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert leftovers(host / "enc.plan") == [] and (host / "enc.plan").read_bytes() == plan
