"""A refresh is not a release: ``trtfarm sign`` renewing a claim adds no Triton version and keeps the release's age.

A real store with real TensorRT-RTX plans, signed and released by the build (tests/conftest_builds.py), refreshed by
the code ``trtfarm sign`` runs, and read back through ``trtfarm status --json`` and ``trtfarm triton --json``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest

from trtfarm import layout
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import HISTORY, read_pointer, refresh_release
from trtfarm.publishing.sign_store import sign_store
from trtfarm.releases.moves import move_release
from trtfarm.signing.keys import PemKeySigner
from trtfarm.signing.release_claim import unverified_claim
from trtfarm.store import open_store

from .conftest_builds import publish_export
from .test_signing import RELEASED_FLEET, TOOLCHAIN, key_pair, trtfarm

TARGET, GPU = "rtx-4090-rtx1.7", "rtx-4090"
T0, T1 = 1_700_000_000, 1_800_000_000
ALWAYS = timedelta(days=31)  # a refresh window longer than a claim's life: every `sign` refreshes


@pytest.fixture
def farm(tmp_path):
    """A signed store with the encoder released for the RTX 4090 (export ``T0``), and its parts by name."""
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    private, public = key_pair(tmp_path, "worker")
    store, signer = open_store((tmp_path / "store").as_uri()), PemKeySigner(private)
    _, outcomes = publish_export(store, fleet, tmp_path / "export0", 0, T0, [TARGET], signer=signer)
    assert outcomes[TARGET].release.action == "moved"
    return {"root": tmp_path, "fleet": fleet, "store": store, "signer": signer, "trusted": str(public),
            "key": layout.release_key("encoder", GPU, TOOLCHAIN), "private": str(private),
            "first": outcomes[TARGET].manifest.removeprefix(store.uri + "/")}


def _cli(farm, *args: str):
    env = {"TRTFARM_TRUSTED_KEYS": farm["trusted"], "TRTFARM_SIGNING_KEY": farm["private"]}
    done = trtfarm(*args, "--store", farm["store"].uri, "--targets-file", str(farm["fleet"]), env=env,
                   cwd=farm["root"])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _status(farm) -> dict:
    rows = [r for r in _cli(farm, "status", "--json") if r["target"] == TARGET]
    assert len(rows) == 1 and rows[0]["state"] == "released", rows
    return rows[0]


def _triton(farm, repo: str = "repo") -> list[int]:
    doc = _cli(farm, "triton", "encoder", "--repo", str(farm["root"] / repo), "--gpu", GPU, "--json")
    [repository] = doc["repositories"]
    return repository["versions"]


def _refresh(farm, times: int) -> None:
    """``times`` runs of what `trtfarm sign` runs, each refreshing the release (checked: version + 1 each)."""
    before, _ = read_pointer(farm["store"], farm["key"])
    for _ in range(times):
        done = sign_store(farm["store"], farm["signer"], refresh_within=ALWAYS)
        assert done.releases == [farm["key"]] and not done.refused
    after, _ = read_pointer(farm["store"], farm["key"])
    assert after.version == before.version + times and after.current.action == "refresh"
    assert unverified_claim(after.claim).version == after.version


def test_thirty_sign_refreshes_add_no_triton_version_and_keep_the_release_age(farm):
    released = _status(farm)
    assert _triton(farm, "before") == [1]
    time.sleep(1.1)  # a refresh now is at least a second younger than the release: the events' times differ
    _refresh(farm, 30)

    now = _status(farm)
    assert now["released_at"] == released["released_at"]
    at = datetime.fromisoformat(released["released_at"])
    since = (datetime.now(at.tzinfo) - at).total_seconds()
    assert now["age_s"] >= released["age_s"] + 1 and abs(now["age_s"] - since) < 5
    assert _triton(farm) == [1]
    assert sorted(p.name for p in (farm["root"] / "repo" / "encoder").iterdir()) == ["1", "config.pbtxt"]


def test_refreshes_beyond_the_kept_history_keep_the_release_and_its_version(farm):
    [release] = read_pointer(farm["store"], farm["key"])[0].history
    _refresh(farm, HISTORY + 5)
    pointer, _ = read_pointer(farm["store"], farm["key"])
    assert len(pointer.history) == HISTORY and pointer.history[0] == release and pointer.released == release
    assert [e.action for e in pointer.history].count("refresh") == HISTORY - 1
    assert _triton(farm) == [1]


def test_a_rollback_after_refreshes_is_a_new_version(farm):
    store, root = farm["store"], farm["root"]
    _, newer = publish_export(store, farm["fleet"], root / "export1", 1, T1, [TARGET], signer=farm["signer"])
    assert newer[TARGET].release.action == "moved"
    _refresh(farm, 3)
    old = farm["first"]
    move_release(store, old, read_manifest(store, old), release_on="built", reason="p99", rollback=True,
                 signer=farm["signer"])
    time.sleep(1.1)
    _refresh(farm, 3)

    assert _triton(farm) == [1, 2, 3]
    plans = root / "repo" / "encoder"
    assert (plans / "3" / "model.rtx-4090.plan").read_bytes() == (plans / "1" / "model.rtx-4090.plan").read_bytes()
    assert (plans / "2" / "model.rtx-4090.plan").read_bytes() != (plans / "3" / "model.rtx-4090.plan").read_bytes()
    pointer, _ = read_pointer(store, farm["key"])
    assert (pointer.released.action, pointer.released.manifest) == ("rollback", old)
    assert _status(farm)["released_at"] == pointer.released.at != pointer.current.at


@pytest.mark.parametrize(("days", "refreshed"), [(9, True), (11, False)])
def test_sign_refreshes_a_claim_that_expires_within_ten_days(farm, days, refreshed):
    short = refresh_release(farm["store"], farm["key"], farm["signer"], reason="short claim",
                            expiry=timedelta(days=days))
    done = _cli(farm, "sign", "--json")
    after, _ = read_pointer(farm["store"], farm["key"])
    assert (done["signed_releases"] == [farm["key"]]) is refreshed
    assert after.version == short.version + refreshed
    left = unverified_claim(after.claim).expires() - unverified_claim(short.claim).issued()
    assert (left > timedelta(days=29)) is refreshed


def test_triton_refuses_a_history_whose_last_release_names_another_plan(farm):
    store = farm["store"]
    publish_export(store, farm["fleet"], farm["root"] / "export1", 1, T1, [TARGET], signer=farm["signer"])
    _refresh(farm, 1)
    pointer, etag = read_pointer(store, farm["key"])
    *moves, release, refresh = pointer.history
    assert (release.action, refresh.action, refresh.manifest) == ("release", "refresh", pointer.manifest)
    forged = [*moves, release.model_copy(update={"manifest": farm["first"]}), refresh]  # ends at the named plan
    store.compare_and_swap(farm["key"], pointer.model_copy(update={"history": forged}).model_dump_json().encode(),
                           etag)
    done = trtfarm("triton", "encoder", "--repo", str(farm["root"] / "repo"), "--gpu", GPU, "--store", store.uri,
                   "--targets-file", str(farm["fleet"]), env={"TRTFARM_TRUSTED_KEYS": farm["trusted"]})
    assert done.returncode == 1 and "its history's last release names " + farm["first"] in done.stderr, done.stderr
    assert not (farm["root"] / "repo" / "encoder").exists()
