"""One state of the fleet, told the same by ``status`` and by what serving hosts do (``pull``).

A signed store (tests/signed_farm.py: enc released twice on two GPUs, mlp once, real TensorRT-RTX plans) is copied
per test and changed the way an operator or an attacker could; ``status --json`` and ``pull`` then run as a user
runs them, in subprocesses, twice in a row (a view's cache on this machine must not change the second answer).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import trtfarm.store
from trtfarm import layout
from trtfarm.publishing.release import read_pointer
from trtfarm.store import open_store

from . import forkcli
from .signed_farm import GPU, build_farm

TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
TARGET = "rtx-4090-rtx1.7"


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    return build_farm(tmp_path_factory.mktemp("state"))


@pytest.fixture
def host(farm, tmp_path):
    """A copy of the farm's store, and environments with and without the workers' key trusted (own caches)."""
    shutil.copytree(farm["root"] / "store", tmp_path / "store")
    store = open_store((tmp_path / "store").as_uri())
    base = {"TRTFARM_RELEASE_STATE": str(tmp_path / "host" / "accepted.json"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    trusted = {**base, "TRTFARM_TRUSTED_KEYS": str(farm["keys"]["worker"][1])}
    return store, base, trusted, tmp_path


def run(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "XDG_"))}
    done = forkcli.trtfarm(args, env={**clean, "COLUMNS": "200", **env}, cwd=cwd, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def status(farm, store, env, tmp) -> dict[tuple[str, str], dict]:
    """``status --json`` run twice: both answers must be the same (ages aside); the cells by (model, target)."""
    answers = []
    for _ in range(2):
        done = run("status", "--json", "--store", store.uri, "--targets-file", str(farm["fleet"]), env=env, cwd=tmp)
        assert done.returncode == 0, done.stderr[-3000:]
        answers.append({(c["model"], c["target"]): {**c, "age_s": None} for c in json.loads(done.stdout)})
    assert answers[0] == answers[1]
    return answers[0]


def pull(farm, store, env, tmp, name: str, model: str = "enc") -> subprocess.CompletedProcess:
    return run("pull", model, "--gpu", GPU, "--toolchain", TOOLCHAIN, "--to", str(tmp / name / "enc.plan"),
               "--store", store.uri, "--targets-file", str(farm["fleet"]), env=env, cwd=tmp)


def test_status_says_signed_only_for_what_pull_takes_with_the_keys_it_trusts(farm, host):
    store, plain, trusted, tmp = host
    assert status(farm, store, trusted, tmp)["enc", TARGET]["signed"] == "signed"
    assert pull(farm, store, trusted, tmp, "before").returncode == 0
    # without trusted keys, a signature is there but nothing here checked it: never "signed"
    assert status(farm, store, plain, tmp)["enc", TARGET]["signed"] == "unverified"
    pointer, _ = read_pointer(store, layout.release_key("enc", GPU, TOOLCHAIN))
    folder = layout.folder_of(pointer.manifest)
    bundle = next(k for k in store.list(f"{folder}/") if layout.leaf_of(k).startswith(layout.SIGNATURE_PREFIX))
    store.delete(bundle)
    cell = status(farm, store, trusted, tmp)["enc", TARGET]  # the same machine: its cache must not answer
    refused = pull(farm, store, trusted, tmp, "after")
    assert refused.returncode == 1 and "unsigned" in refused.stderr
    assert cell["state"] == "refused" and cell["signed"] == "refused" and "unsigned" in cell["reason"], cell
    assert not (tmp / "after").exists()
    others = status(farm, store, trusted, tmp)
    assert others["mlp", TARGET]["signed"] == "signed"  # one refusal hides nothing else


def test_a_pointer_naming_a_missing_manifest_is_refused_by_status_and_pull_alike(farm, host):
    store, plain, _, tmp = host
    pointer, _ = read_pointer(store, layout.release_key("enc", GPU, TOOLCHAIN))
    store.delete(pointer.manifest)
    refused = pull(farm, store, plain, tmp, "p")
    assert refused.returncode == 1 and "tampered" in refused.stderr
    cells = status(farm, store, plain, tmp)
    assert cells["enc", TARGET]["state"] == "refused" and "tampered" in cells["enc", TARGET]["reason"]
    assert cells["mlp", TARGET]["state"] == "released"


@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2]", b'{"format": 1}'])
def test_a_damaged_object_is_named_in_its_own_cells_on_every_run_and_hides_nothing(farm, host, garbage):
    store, plain, _, tmp = host
    pointer, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    store.compare_and_swap(pointer.manifest, garbage, store.get(pointer.manifest).etag)
    cells = status(farm, store, plain, tmp)  # twice: the damage is named both times
    assert cells["mlp", TARGET]["state"] in ("damaged", "refused"), cells["mlp", TARGET]
    assert "manifest" in cells["mlp", TARGET]["reason"]
    assert cells["enc", TARGET]["state"] == "released"
    assert pull(farm, store, plain, tmp, "m").returncode == 0  # enc still serves


def test_a_state_record_is_read_only_while_current_and_never_changes_an_answer(farm, host):
    store, plain, trusted, tmp = host
    truth = status(farm, store, plain, tmp)
    fleet = str(farm["fleet"])
    done = run("status", "--record", "--json", "--store", store.uri, "--targets-file", fleet, env=plain, cwd=tmp)
    assert done.returncode == 0 and "recorded the state of 2 model(s)" in done.stderr, done.stderr
    assert {k for k in store.list(layout.state_prefix())} == {layout.state_key("enc"), layout.state_key("mlp")}
    assert status(farm, store, plain, tmp) == truth
    # a record older than the store (a pointer moved since): computed from the records, and said so
    key = layout.release_key("enc", GPU, TOOLCHAIN)
    pointer, etag = read_pointer(store, key)
    store.delete(pointer.manifest)
    stale = run("status", "--json", "--store", store.uri, "--targets-file", fleet, env=plain, cwd=tmp)
    assert "1 of 2 models have no state recorded" in stale.stderr
    assert json.loads(stale.stdout)[0]["state"] in ("refused",)
    # damaged records: ignored (named), the answer computed from the objects
    for garbage in (b"[]", b'{"format": 1, "model": "mlp"}', b"\xff"):
        store.compare_and_swap(layout.state_key("mlp"), garbage, store.get(layout.state_key("mlp")).etag)
        cells = status(farm, store, plain, tmp)
        assert cells["mlp", TARGET] == truth["mlp", TARGET]


def test_a_forged_state_record_never_makes_a_view_say_signed_what_pull_refuses(farm, host):
    store, plain, trusted, tmp = host
    fleet = str(farm["fleet"])
    pointer, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    folder = layout.folder_of(pointer.manifest)
    for key in store.list(f"{folder}/"):
        if layout.leaf_of(key).startswith(layout.SIGNATURE_PREFIX):
            store.delete(key)
    assert run("status", "--record", "--store", store.uri, "--targets-file", fleet, env=plain, cwd=tmp).returncode == 0
    record = json.loads(store.get(layout.state_key("mlp")).data)
    assert record["cells"][TARGET]["cell"]["signed"] == "unsigned"
    record["cells"][TARGET]["cell"]["signed"] = "signed"  # the listing still matches: only words forged
    key = layout.state_key("mlp")
    store.compare_and_swap(key, json.dumps(record).encode(), store.get(key).etag)
    assert pull(farm, store, trusted, tmp, "t", "mlp").returncode == 1
    assert status(farm, store, trusted, tmp)["mlp", TARGET]["signed"] == "refused"
    assert status(farm, store, plain, tmp)["mlp", TARGET]["signed"] == "unsigned"  # no record says signed untrusted


def test_a_released_plan_object_gone_is_refused_by_status_as_by_pull(farm, host):
    store, plain, trusted, tmp = host
    pointer, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    store.delete(pointer.plan_key)
    assert pull(farm, store, plain, tmp, "p", "mlp").returncode != 0
    for env in (plain, trusted):
        cell = status(farm, store, env, tmp)["mlp", TARGET]
        assert cell["state"] in ("refused", "damaged") and "plan" in cell["reason"], cell


def _trusted(path: Path):
    from trtfarm.project.fleet_file import signing_settings

    return signing_settings(env={"TRTFARM_TRUSTED_KEYS": str(path)}, only="trust").trusted_keys()


def test_a_signed_state_record_is_one_object_per_model_for_a_host_that_trusts_its_key(farm, host, tmp_path):
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.state.views import status as fleet_status

    from .store_requests import Tally, counting

    store, plain, trusted, tmp = host
    fleet, trust = load_fleet(farm["fleet"]), _trusted(farm["keys"]["worker"][1])
    truth = [c.to_json() | {"age_s": None} for c in fleet_status(store, fleet, trust=trust, cache=False).cells]
    signing = {**trusted, "TRTFARM_SIGNING_KEY": str(farm["keys"]["worker"][0])}
    done = run("status", "--record", "--store", store.uri, "--targets-file", str(farm["fleet"]), env=signing, cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert all(json.loads(store.get(k).data)["signature"] for k in store.list(layout.state_prefix()))

    def cold() -> tuple[list, Tally]:
        tally = Tally()
        with counting(tally):  # the store opened inside, so its requests are counted
            found = fleet_status(trtfarm.store.open_store(store.uri), fleet, trust=trust, cache=False)
        return [c.to_json() | {"age_s": None} for c in found.cells], tally

    cells, tally = cold()
    assert cells == truth and tally.by_method().get("get", 0) == 2, tally.by_method()  # enc's and mlp's records
    # a record whose words were changed after signing: its signature fails, so the objects answer
    key = layout.state_key("mlp")
    doc = json.loads(store.get(key).data)
    doc["cells"][TARGET]["expires_at"] = "2999-01-01T00:00:00+00:00"
    store.compare_and_swap(key, json.dumps(doc).encode(), store.get(key).etag)
    cells, tally = cold()
    assert cells == truth and tally.by_method()["get"] > 2
    # a record signed by a key this host does not trust: not read either
    stranger = {**trusted, "TRTFARM_SIGNING_KEY": str(farm["keys"]["stranger"][0])}
    run("status", "--record", "--store", store.uri, "--targets-file", str(farm["fleet"]), env=stranger, cwd=tmp)
    cells, tally = cold()
    assert cells == truth and tally.by_method()["get"] > 2
    # the plan's signature deleted after the record was signed: the listing moved, the record is old, pull refuses
    pointer, _ = read_pointer(store, layout.release_key("enc", GPU, TOOLCHAIN))
    folder = layout.folder_of(pointer.manifest)
    store.delete(next(k for k in store.list(f"{folder}/") if layout.leaf_of(k).startswith(layout.SIGNATURE_PREFIX)))
    cell = {(c["model"], c["target"]): c for c in cold()[0]}["enc", TARGET]
    assert cell["state"] == "refused" and cell["signed"] == "refused"
    assert pull(farm, store, trusted, tmp, "gone").returncode == 1


def test_a_store_path_is_printed_as_given(farm, host):
    store, plain, _, tmp = host
    odd = tmp / "my st [b]ü"
    shutil.copytree(tmp / "store", odd)
    done = run("status", "--store", str(odd), "--targets-file", str(farm["fleet"]), env=plain, cwd=tmp)
    assert done.returncode == 0 and f"in {odd}:" in done.stdout and "%20" not in done.stdout, done.stdout
    unknown = run("status", "nope", "--store", str(odd), "--targets-file", str(farm["fleet"]), env=plain, cwd=tmp)
    assert unknown.returncode == 2 and str(odd) in unknown.stderr and "%5B" not in unknown.stderr
