"""Retention keeps the newest N per (model, GPU, toolchain) and whatever a pointer references.

What the pointers reference is the state model's answer (``overview.release_references``), the one ``status``
reads. The generated store states below hold gc to what serving hosts do: a fast farm (tests/chain_farm.py: made-up
plan bytes, real signatures) whose pointers, candidate channel, manifests and state records are changed the ways an
operator or an attacker could, one combination per store; in each, gc never deletes a plan a pointer names, keeps
every plan of exactly the identities whose pointers ``pull`` refuses, and ``status`` calls those same identities
damaged or refused. This file is what the mutation bench runs for gc (bench/mutation_score.py).
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import time

import pytest

from trtfarm import layout
from trtfarm.errors import TrtfarmError
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.gc import delete_plans, plans_to_delete
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release_check import asked_identity, manifest_identity_problem, read_pointer, served_release
from trtfarm.releases.moves import move_release
from trtfarm.state.recorder import record_states
from trtfarm.state.views import release_references, status
from trtfarm.store import open_store
from trtfarm.vocabulary.fleetview import ReleaseRef
from trtfarm.vocabulary.promotion import Promotion

from .chain_farm import T0, T1, TC, Farm
from .conftest_builds import publish_export


def test_gc_keeps_newest_and_released_and_is_a_dry_run_until_applied(fleet_file, tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    keys = []
    for i in range(4):
        _, out = publish_export(store, fleet_file, tmp_path / f"e{i}", i, 1_700_000_000 + i, ["rtx-4090-rtx1.7"])
        keys.append(out["rtx-4090-rtx1.7"].manifest.removeprefix(store.uri + "/"))
    move_release(store, keys[0], read_manifest(store, keys[0]), release_on="built", reason="pin the oldest",
                 rollback=True)
    doomed = plans_to_delete(store, 2, release_references(store, cache=False))
    assert [d.manifest_key for d in doomed] == [keys[1]]  # keys[0] is released, keys[2:] are the newest two
    assert read_manifest(store, keys[1]) is not None  # dry run deleted nothing
    freed = delete_plans(store, doomed)
    assert freed > 0 and read_manifest(store, keys[1]) is None
    assert not list(store.list(keys[1].rsplit("/", 1)[0]))
    assert all(read_manifest(store, k) for k in (keys[0], keys[2], keys[3]))


# --- generated store states ---------------------------------------------------------------------------------------
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-3090: {nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx-3090-rtx1.7, gpu: rtx-3090, toolchain: rtx-1.7, release_on: built}
"""
GPU_OF = {"rtx-4090-rtx1.7": "rtx-4090", "rtx-3090-rtx1.7": "rtx-3090"}
STABLE = layout.release_key("enc", "rtx-4090", TC)
CANDIDATE = layout.channel_key("enc", "rtx-4090", TC, "candidate")
TM = "2026-01-15T00:00:00+00:00"  # an enc build between the two released ones, released by no pointer
# what the stable pointer of enc on the RTX 4090 (it names enc's T1 build) is made, and the objects it names
POINTERS = ("intact", "missing", "damaged", "mlp's pointer", "mlp's manifest", "a missing manifest",
            "its manifest damaged", "mlp's manifest in its folder")
CANDIDATES = ("absent", "intact", "damaged", "stable's pointer")  # the candidate pointer of that identity (names T0)
RECORDS = ("none", "stale", "current", "damaged", "forged", "unsigned")  # the state records, written signed unless
STATES = list(itertools.product(POINTERS, CANDIDATES, RECORDS))
KEPT = re.compile(r"gc keeps every plan of (\S+)\.$")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The farm, a candidate channel naming enc's oldest build, and unreleased builds of enc (one without an export
    time) and of mlp."""
    root = tmp_path_factory.mktemp("gc-states")
    farm = Farm(root / "farm")
    (root / "gpu_targets.yaml").write_text(FLEET)
    t0 = farm.keys["enc", "rtx-4090", T0]
    move_release(farm.store, t0, read_stored(farm.store, t0).manifest, release_on="built", reason="candidate",
                 signer=farm.signer, channel="candidate", promotion=Promotion())
    farm.keys["enc", "rtx-4090", TM] = farm.publish("enc", "rtx-4090", TM, 5, farm.signer)
    farm.keys["mlp", "rtx-4090", T0] = farm.publish("mlp", "rtx-4090", T0, 6, farm.signer)
    farm.keys["enc", "rtx-4090", None] = farm.publish("enc", "rtx-4090", None, 7, farm.signer)  # no export time
    return farm, load_fleet(root / "gpu_targets.yaml")


@pytest.fixture
def copy(base, tmp_path, monkeypatch):
    """A fresh copy of the base store for each state (this test's own summary cache)."""
    farm, fleet = base
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    n = iter(range(len(STATES) + 1))

    def fresh():
        folder = tmp_path / f"store{next(n)}"
        shutil.copytree(farm.root / "store", folder)
        return open_store(folder.as_uri())

    return farm, fleet, fresh


def _swap(store, key: str, data: bytes) -> None:
    blob = store.get(key)
    store.compare_and_swap(key, data, blob.etag if blob else None)


def _tamper_pointer(store, farm: Farm, how: str) -> None:
    pointer, _ = read_pointer(store, STABLE)
    mlp, _ = read_pointer(store, layout.release_key("mlp", "rtx-4090", TC))
    if how == "missing":
        store.delete(STABLE)
    elif how == "damaged":
        _swap(store, STABLE, b"{not json")
    elif how == "mlp's pointer":
        _swap(store, STABLE, mlp.model_dump_json().encode())
    elif how == "mlp's manifest":
        _swap(store, STABLE, pointer.model_copy(update={"manifest": mlp.manifest, "plan_sha256": mlp.plan_sha256})
              .model_dump_json().encode())
    elif how == "a missing manifest":
        gone = layout.manifest_key(layout.plan_prefix("enc", "0" * 64, "rtx-4090", TC, "1" * 64))
        _swap(store, STABLE, pointer.model_copy(update={"manifest": gone}).model_dump_json().encode())
    elif how == "its manifest damaged":
        _swap(store, pointer.manifest, b'{"format": 1}')
    elif how == "mlp's manifest in its folder":
        _swap(store, pointer.manifest, store.get(mlp.manifest).data)


def _tamper_candidate(store, how: str, stable: bytes) -> None:
    if how == "absent":
        store.delete(CANDIDATE)
    elif how == "damaged":
        _swap(store, CANDIDATE, b"[]")
    elif how == "stable's pointer":
        _swap(store, CANDIDATE, stable)


def _lie_in_records(store, farm: Farm) -> None:
    """Every pointer of every record said to name mlp's manifest, and to be served: a record that would let gc
    delete every plan the pointers really name."""
    mlp = farm.keys["mlp", "rtx-4090", T1]
    for key in store.list(layout.state_prefix()):
        doc = json.loads(store.get(key).data)
        doc["releases"] = {k: {"manifest": mlp, "refusal": None} for k in doc["releases"]}
        _swap(store, key, json.dumps(doc).encode())


def _make(fresh, farm: Farm, fleet, pointer: str, candidate: str, record: str):
    store = fresh()
    stable = store.get(STABLE).data
    if record == "stale":
        record_states(store, fleet, by="test", signer=farm.signer, trust=farm.trust)
        time.sleep(0.02)  # a file store's version is size and mtime: a rewrite in the same tick would look current
    _tamper_candidate(store, candidate, stable)
    _tamper_pointer(store, farm, pointer)
    if record in ("current", "damaged", "forged"):
        record_states(store, fleet, by="test", signer=farm.signer, trust=farm.trust)
    if record == "unsigned":
        record_states(store, fleet, by="test", trust=farm.trust)
    if record in ("forged", "unsigned"):
        _lie_in_records(store, farm)
    if record == "damaged":
        for key in store.list(layout.state_prefix()):
            _swap(store, key, b'{"format": 1, "model": "x"}')
    return store


def _what_hosts_do(store, farm: Farm) -> tuple[set[str], set[str]]:
    """The manifests a pointer names (whatever a host says of it), and the identities whose pointers ``pull``
    refuses without keys (it cannot tell what they reference)."""
    named, refused = set(), set()
    for key in [*store.list(layout.releases_prefix()), *store.list(layout.channel_prefix("candidate"))]:
        try:
            served_release(store, key, None)
        except TrtfarmError:
            refused.add(asked_identity(key))
        for trust in (None, farm.trust):
            try:
                named.add(served_release(store, key, trust).pointer.manifest)
            except TrtfarmError:
                pass
        try:
            named.add(read_pointer(store, key)[0].manifest)
        except TrtfarmError:
            pass
    return named, refused


def _kept_whole(skipped: list[str]) -> set[str]:
    return {m.group(1) for line in skipped if (m := KEPT.search(line))}


def _intact(store, key: str) -> bool:
    try:
        stored = read_stored(store, key)
    except TrtfarmError:
        return False
    return manifest_identity_problem(key, stored.manifest) is None


@pytest.mark.parametrize("pointer, candidate, record", STATES)
def test_gc_never_deletes_what_a_pointer_names_and_keeps_what_hosts_refuse_whole(copy, pointer, candidate, record):
    farm, fleet, fresh = copy
    store = _make(fresh, farm, fleet, pointer, candidate, record)
    named, refused = _what_hosts_do(store, farm)
    manifests = [k for k in store.list(layout.plans_prefix()) if layout.leaf_of(k) == layout.MANIFEST_NAME]
    for trust in (None, farm.trust):  # with trusted keys, the records signed by one are read
        skipped: list[str] = []
        doomed = {d.manifest_key for d in plans_to_delete(store, 0, release_references(store, trust), skipped)}
        assert not doomed & named, (trust, doomed & named)
        assert _kept_whole(skipped) == refused and not [line for line in skipped if ".;" in line], skipped
        # everything else goes (keep 0): each intact manifest no pointer names, of an identity hosts are served
        assert doomed == {k for k in manifests if k not in named and _intact(store, k)
                          and "/".join(layout.parse_plan_key(k)[i] for i in (0, 2, 3)) not in refused}, skipped
    cells = status(store, fleet).cells
    flagged = {f"{c.model}/{GPU_OF[c.target]}/{TC}" for c in cells
               if c.state in ("damaged", "refused") or c.candidate_verdict == "damaged"}
    assert flagged == refused, [(c.model, c.target, c.state, c.reason, c.candidate_verdict) for c in cells]


def test_retention_ranks_by_export_time_says_the_rank_and_frees_what_it_deletes(copy):
    """enc on the RTX 4090 holds T1 (released), TM, T0 and a build without an export time (oldest of all)."""
    farm, _, fresh = copy
    store = fresh()
    store.delete(CANDIDATE)
    undated = farm.keys["enc", "rtx-4090", None]
    doomed = plans_to_delete(store, 1, release_references(store))
    ranks = {d.manifest_key: d.why for d in doomed if d.manifest_key.startswith("plans/enc/")}
    assert ranks == {farm.keys["enc", "rtx-4090", TM]: f"enc/rtx-4090/{TC}: #2 newest, not released (keeping 1)",
                     farm.keys["enc", "rtx-4090", T0]: f"enc/rtx-4090/{TC}: #3 newest, not released (keeping 1)",
                     undated: f"enc/rtx-4090/{TC}: #4 newest, not released (keeping 1)"}, ranks
    assert delete_plans(store, doomed) == sum(d.bytes for d in doomed) > max(d.bytes for d in doomed)
    assert not any(store.get(k) for d in doomed for k in (d.manifest_key, d.plan_key, *d.attestations))


def test_a_manifest_copied_into_an_unreleased_folder_is_kept_and_named(copy):
    farm, _, fresh = copy
    store = fresh()
    tm = farm.keys["enc", "rtx-4090", TM]
    _swap(store, tm, store.get(farm.keys["mlp", "rtx-4090", T1]).data)
    skipped: list[str] = []
    doomed = {d.manifest_key for d in plans_to_delete(store, 0, release_references(store), skipped)}
    assert tm not in doomed and farm.keys["mlp", "rtx-4090", T0] in doomed
    assert [line for line in skipped if tm in line and "gc keeps it." in line], skipped


def test_a_refused_pointer_is_one_sentence_naming_the_identity_kept_whole(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    key = layout.release_key("enc", "rtx-4090", TC)
    skipped: list[str] = []
    refs = [ReleaseRef(key, asked_identity(key), "stable", None, "the pointer names another model's manifest.")]
    assert plans_to_delete(store, 1, refs, skipped) == []
    assert skipped == [f"the pointer names another model's manifest; gc keeps every plan of enc/rtx-4090/{TC}."]


def test_the_states_cover_what_they_say(copy):
    """The generated states reach each outcome: a pointer hosts refuse, the candidate's plan kept, records read."""
    farm, fleet, fresh = copy
    t0 = farm.keys["enc", "rtx-4090", T0]
    store = _make(fresh, farm, fleet, "intact", "intact", "current")
    refs = release_references(store, farm.trust)
    assert {r.pointer: r.manifest for r in refs}[CANDIDATE] == t0
    assert t0 not in {d.manifest_key for d in plans_to_delete(store, 1, refs)}
    assert _what_hosts_do(store, farm)[1] == set()
    for pointer in POINTERS[2:]:
        assert _what_hosts_do(_make(fresh, farm, fleet, pointer, "absent", "none"), farm)[1] == {
            f"enc/rtx-4090/{TC}"}, pointer
