"""The state model in process: ``overview.status`` and the state records on real stores, copied per test.

Two stores, built once per module: the fleet views' store (tests/fleet_store.py: the encoder released on build for
two RTX targets and pending its engine check on a third, dedupe's build failed) and the signed farm
(tests/signed_farm.py: enc released twice, mlp once, every plan and release signed by the workers' key). Each test
copies one, changes it as an operator, a worker or an attacker could, and asks ``status`` what a user would see.
This file is what the mutation bench runs for the state model (``state/status.py``, ``state/views.py``,
``state/record.py``); tests/test_fleet_state.py asks the same through the command line.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.gc import plans_to_delete
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.registry import register_export
from trtfarm.publishing.release import read_pointer
from trtfarm.releases.moves import move_release
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.signing.release_claim import unverified_claim
from trtfarm.state.record import STATE_FORMAT
from trtfarm.state.recorder import record_states
from trtfarm.state.views import release_references, status
from trtfarm.store import open_store

from .fleet_store import FLEET, build_all, built_store, dedupe_export, encoder_export
from .signed_farm import GPU, TARGETS, build_farm
from .store_requests import CountingStore

TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
SIGNED_TARGET = "rtx-4090-rtx1.7"
# the views' fleet with another toolchain entry of the same TensorRT-RTX, no target's: its serving image carries
# another version, so serving hosts refuse the plans of 1.7.1.116 (no target's own settings or toolchain changed)
IMAGED = FLEET.replace("toolchains:\n", "toolchains:\n  rtx-serving: {flavour: tensorrt_rtx, version: \"1.7.1.116\", "
                       "serving_images: [{image: \"serve:old\", tensorrt_version: \"1.6.0\"}]}\n")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("state-fast")
    return work, built_store(work, (work / "store").as_uri())


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    return build_farm(tmp_path_factory.mktemp("state-signed"))


@pytest.fixture
def views(built, tmp_path, monkeypatch):
    """A copy of the fleet views' store (this test's own summary cache), and its fleet."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(built[0] / "store", tmp_path / "store")
    return open_store((tmp_path / "store").as_uri()), load_fleet(built[1])


@pytest.fixture
def farm(signed, tmp_path, monkeypatch):
    """A copy of the signed farm's store, its fleet, and the keys a host may trust."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(signed["root"] / "store", tmp_path / "store")
    keys = {name: load_trusted_keys([signed["keys"][name][1]], "TEST") for name in ("worker", "stranger")}
    return open_store((tmp_path / "store").as_uri()), load_fleet(signed["fleet"]), keys


def _released(found) -> list:
    """The cells of the signed farm's released targets (the others have nothing released)."""
    return [c for c in found.cells if c.target in TARGETS]


def _states(found) -> dict[tuple[str, str], str]:
    return {(c.model, c.target): c.state for c in found.cells}


def test_signed_is_what_the_trusted_keys_verify_and_nothing_without_them(farm):
    store, fleet, keys = farm
    trusted = _released(status(store, fleet, trust=keys["worker"]))
    assert len(trusted) == 4 and {(c.state, c.signed) for c in trusted} == {("released", "signed")}
    plain = _released(status(store, fleet))
    assert {(c.state, c.signed) for c in plain} == {("released", "unverified")}
    stranger = _released(status(store, fleet, trust=keys["stranger"]))
    assert {(c.state, c.signed) for c in stranger} == {("refused", "refused")}
    assert all(c.reason.startswith("serving hosts refuse it: ") and "key" in c.reason for c in stranger), stranger
    again = _released(status(store, fleet, trust=keys["worker"]))  # the stranger's answer is not kept for these keys
    assert [(c.state, c.signed, c.reason) for c in again] == [(c.state, c.signed, c.reason) for c in trusted]


def test_an_unsigned_release_is_refused_where_keys_are_trusted_and_unsigned_where_none_are(farm):
    store, fleet, keys = farm
    pointer, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    for key in store.list(f"{layout.folder_of(pointer.manifest)}/"):
        if layout.leaf_of(key).startswith(layout.SIGNATURE_PREFIX):
            store.delete(key)
    plain = status(store, fleet).cell("mlp", SIGNED_TARGET)
    assert (plain.state, plain.signed) == ("released", "unsigned")
    trusted = status(store, fleet, trust=keys["worker"])
    mlp = trusted.cell("mlp", SIGNED_TARGET)
    assert (mlp.state, mlp.signed) == ("refused", "refused") and "unsigned" in mlp.reason, mlp
    assert trusted.cell("enc", SIGNED_TARGET).signed == "signed"


def test_an_unregistered_model_is_judged_by_its_newest_release_and_an_older_one_is_stale(farm):
    store, fleet, keys = farm
    key = layout.release_key("enc", GPU, TOOLCHAIN)
    current, _ = read_pointer(store, key)
    enc = status(store, fleet).cell("enc", SIGNED_TARGET)
    assert (enc.state, enc.manifest) == ("released", current.manifest), enc
    assert enc.age_s is not None and enc.age_s >= 0 and enc.released_at == current.released.at
    old = next(e.manifest for e in current.history if e.manifest != current.manifest)
    move_release(store, old, read_manifest(store, old), release_on="built", reason="p99 regressed", rollback=True)
    back = status(store, fleet).cell("enc", SIGNED_TARGET)  # the same machine: nothing cached may answer
    assert back.state == "stale" and back.reason.startswith(f"rolled back to {layout.short_ref(old)}"), back
    assert "p99 regressed" in back.reason and back.export == enc.export  # the build it wants is still the newest


def test_a_release_whose_manifest_is_gone_is_refused_on_the_next_view(farm):
    store, fleet, keys = farm
    assert status(store, fleet).cell("enc", SIGNED_TARGET).state == "released"
    pointer, _ = read_pointer(store, layout.release_key("enc", GPU, TOOLCHAIN))
    store.delete(pointer.manifest)
    for trust in (None, keys["worker"]):
        cell = status(store, fleet, trust=trust).cell("enc", SIGNED_TARGET)
        assert cell.state == "refused" and "tampered" in cell.reason, cell
    assert status(store, fleet).cell("mlp", SIGNED_TARGET).state == "released"


def test_a_pointer_hosts_refuse_is_refused_though_the_build_it_should_name_waits_and_gc_keeps_its_plans(farm):
    store, fleet, keys = farm
    key = layout.release_key("enc", GPU, TOOLCHAIN)
    enc, etag = read_pointer(store, key)
    mlp, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    store.compare_and_swap(key, mlp.model_dump_json().encode(), etag)  # enc's build stays published, unreleased
    for trust in (None, keys["worker"]):
        cell = status(store, fleet, trust=trust).cell("enc", SIGNED_TARGET)
        assert (cell.state, cell.manifest) == ("refused", mlp.manifest) and "names mlp/" in cell.reason, cell
    skipped: list[str] = []
    doomed = plans_to_delete(store, 0, release_references(store), skipped)
    assert [line.rsplit(" ", 1)[1] for line in skipped] == [f"enc/{GPU}/{TOOLCHAIN}."], skipped
    assert not [d for d in doomed if d.manifest_key.startswith("plans/enc/") and f"/{GPU}/" in d.manifest_key]


def test_the_cells_of_the_views_store_released_pending_failed_and_missing(views):
    store, fleet = views
    found = status(store, fleet)
    assert _states(found) == {
        ("dedupe", "rtx4090-rtx1.7"): "failed", ("dedupe", "h100-trt11.4"): "missing",
        ("encoder", "rtx4090-rtx1.7"): "released", ("encoder", "rtx5090-rtx1.7"): "released",
        ("encoder", "rtx3090-rtx1.7-o5"): "pending", ("encoder", "h100-trt11.4"): "missing"}
    released = found.cell("encoder", "rtx4090-rtx1.7")
    assert released.reason.startswith("released on build; engine check pending on NVIDIA GeForce RTX 4090")
    assert released.signed == "unsigned" and released.engine == "pending" and released.precision == "fp32"
    pending = found.cell("encoder", "rtx3090-rtx1.7-o5")
    assert pending.reason.startswith("engine check pending on NVIDIA GeForce RTX 3090") and pending.since
    assert pending.released_at is None and pending.age_s is None
    failed = found.cell("dedupe", "rtx4090-rtx1.7")
    assert "UNSUPPORTED_NODE" in failed.reason and "\n" not in failed.reason
    assert datetime.fromisoformat(failed.since) <= datetime.now(timezone.utc)
    skipped = found.cell("encoder", "h100-trt11.4")
    assert skipped.reason.startswith("skipped by the latest run: ") and "tensorrt" in skipped.reason


def test_a_failed_engine_check_is_failed_never_pending(views):
    store, fleet = views
    key = status(store, fleet).cell("encoder", "rtx3090-rtx1.7-o5").manifest
    doc = json.loads(store.get(key).data)
    doc["verification"]["engine"] = {**doc["verification"]["engine"], "status": "failed",
                                     "detail": "max abs diff 3.2 > 0.01"}
    store.compare_and_swap(key, json.dumps(doc).encode(), store.get(key).etag)
    cell = status(store, fleet).cell("encoder", "rtx3090-rtx1.7-o5")
    assert cell.state == "failed" and "max abs diff 3.2 > 0.01" in cell.reason, cell
    assert cell.since == doc["created_at"]


def test_a_failure_since_when_counts_the_runs_that_failed_the_same_build(views, built):
    store, fleet = views
    first = status(store, fleet).cell("dedupe", "rtx4090-rtx1.7")
    assert first.state == "failed"
    build_all(store.uri, built[1])
    again = status(store, fleet).cell("dedupe", "rtx4090-rtx1.7")
    assert again.state == "failed" and again.since == first.since  # the second failure does not restart it


def test_a_state_record_answers_only_while_current_and_says_what_the_records_say(views):
    store, fleet = views
    truth = status(store, fleet)
    assert record_states(store, fleet, by="test") == ["dedupe", "encoder"]
    recorded = json.loads(store.get(layout.state_key("encoder")).data)
    assert recorded["model"] == "encoder" and recorded["by"] == "test"
    assert {t: c["cell"]["state"] for t, c in recorded["cells"].items()} == {
        t: s for (m, t), s in _states(truth).items() if m == "encoder"}
    again = status(store, fleet)
    assert [c.to_json() | {"age_s": None} for c in again.cells] == [c.to_json() | {"age_s": None}
                                                                    for c in truth.cells]
    assert again.notes == []
    # a forged record (its inputs still match the listing): its words are read, but never "signed" with keys, and
    # a moved pointer makes it stale: computed from the records, and said so
    key = layout.release_key("encoder", "rtx-4090", TOOLCHAIN)
    pointer, _ = read_pointer(store, key)
    store.delete(pointer.manifest)
    moved = status(store, fleet)
    assert moved.cell("encoder", "rtx4090-rtx1.7").state == "refused"
    assert any("1 of 2 models have no state recorded" in n for n in moved.notes), moved.notes


def test_a_record_for_another_fleet_is_not_read_for_a_changed_target(views, built, tmp_path):
    store, fleet = views
    record_states(store, fleet, by="test")
    changed = built[1].read_text().replace("settings: {optimization_level: 5}", "settings: {optimization_level: 4}")
    (tmp_path / "changed.yaml").write_text(changed)
    cell = status(store, load_fleet(tmp_path / "changed.yaml")).cell("encoder", "rtx3090-rtx1.7-o5")
    assert cell.state == "missing", cell  # a build never made for these settings, not the recorded pending one


def test_a_record_of_another_model_or_shape_is_not_read(views):
    store, fleet = views
    truth = status(store, fleet)
    record_states(store, fleet, by="test")
    enc = store.get(layout.state_key("encoder"))
    doc = json.loads(enc.data)
    doc["cells"]["rtx4090-rtx1.7"]["cell"]["state"] = "failed"
    for forged in ({**doc, "model": "dedupe"}, {**doc, "expected": {"format": 1}}):
        store.compare_and_swap(layout.state_key("encoder"), json.dumps(forged).encode(),
                               store.get(layout.state_key("encoder")).etag)
        assert status(store, fleet).cell("encoder", "rtx4090-rtx1.7").state == "released"
    assert status(store, fleet, ["dedupe"]).models == ["dedupe"] and truth.models == ["dedupe", "encoder"]


def test_a_release_age_is_counted_from_its_release_by_the_clock_given(views):
    store, fleet = views
    cell = status(store, fleet).cell("encoder", "rtx4090-rtx1.7")
    later = datetime.fromisoformat(cell.released_at) + timedelta(hours=2)
    assert status(store, fleet, now=later).cell("encoder", "rtx4090-rtx1.7").age_s == 7200.0


def test_a_newer_export_makes_the_released_builds_stale_with_what_changed(views, tmp_path):
    store, fleet = views
    register_export(store, encoder_export(tmp_path / "encoder-2", 2))  # registered, not built yet
    found = status(store, fleet)
    for target in ("rtx4090-rtx1.7", "rtx5090-rtx1.7"):
        cell = found.cell("encoder", target)
        assert cell.state == "stale" and cell.reason.startswith("export: "), cell
        assert "is newer than the built onnx" in cell.reason and cell.manifest and cell.released_at


def test_a_failure_of_another_build_than_the_one_needed_now_is_not_its_failure(views, built, tmp_path):
    store, fleet = views
    doc = yaml.safe_load(built[1].read_text())
    next(t for t in doc["targets"] if t["id"] == "rtx4090-rtx1.7")["settings"] = {"optimization_level": 2}
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(doc))
    cell = status(store, load_fleet(tmp_path / "changed.yaml")).cell("dedupe", "rtx4090-rtx1.7")
    assert cell.state == "missing" and cell.since is None, cell  # its last failure was of the old settings


def test_a_model_records_its_own_damage_and_a_view_from_records_names_it(views):
    store, fleet = views
    key = status(store, fleet).cell("encoder", "rtx3090-rtx1.7-o5").manifest
    store.compare_and_swap(key, b"{not json", store.get(key).etag)
    record_states(store, fleet, by="test")
    assert json.loads(store.get(layout.state_key("dedupe")).data)["problems"] == []
    assert any(key in p for p in json.loads(store.get(layout.state_key("encoder")).data)["problems"])
    for _ in range(2):  # read from the records, on every run
        found = status(store, fleet)
        assert found.cell("encoder", "rtx3090-rtx1.7-o5").state == "damaged" and found.notes == []
        assert len([p for p in found.problems if key in p]) == 1, found.problems


def test_a_failure_recorded_without_its_build_counts_only_against_the_export_it_followed(views, tmp_path):
    store, fleet = views
    for key in store.list("reports/dedupe/"):  # runs of an older trtfarm: outcomes without their build digest
        if key.endswith("/" + layout.OUTCOMES_NAME):
            doc = [{**o, "build_digest": None} for o in json.loads(store.get(key).data)]
            store.compare_and_swap(key, json.dumps(doc).encode(), store.get(key).etag)
    cell = status(store, fleet).cell("dedupe", "rtx4090-rtx1.7")
    assert cell.state == "failed" and "UNSUPPORTED_NODE" in cell.reason and cell.since, cell
    time.sleep(1.1)  # registration times have a second's resolution: the export is registered after the run
    newer = dedupe_export(tmp_path / "dedupe-2")
    (newer / "farm.yaml").write_text((newer / "farm.yaml").read_text().replace("fp32", "fp16"))
    register_export(store, newer)  # registered after the run that failed: that failure is not of this export
    cell = status(store, fleet).cell("dedupe", "rtx4090-rtx1.7")
    assert cell.state == "missing" and cell.since is None, cell



def test_a_signed_release_is_refused_once_its_claim_expires_whether_computed_or_read_from_a_record(farm, signed):
    store, fleet, keys = farm
    trust = keys["worker"]
    for record in (False, True):  # computed from the store's objects, then read from a signed state record
        if record:
            record_states(store, fleet, by="test", signer=PemKeySigner(signed["keys"]["worker"][0]), trust=trust)
        recorded = json.loads(store.get(layout.state_key("enc")).data)["cells"][SIGNED_TARGET] if record else None
        hints = sorted(k.hint for k in trust.keys)
        assert recorded is None or (recorded["verified"], recorded["keys"]) == ("signed", hints), recorded
        pointer, _ = read_pointer(store, layout.release_key("enc", GPU, TOOLCHAIN))
        claim = unverified_claim(pointer.claim)
        expires = claim.expires()
        assert recorded is None or recorded["expires_at"] == claim.expires_at
        before = status(store, fleet, trust=trust, now=expires - timedelta(minutes=1))
        assert (before.cell("enc", SIGNED_TARGET).signed, before.notes == []) == ("signed", record), before
        after = status(store, fleet, trust=trust, now=expires + timedelta(minutes=1)).cell("enc", SIGNED_TARGET)
        assert (after.state, after.signed) == ("refused", "refused") and "expired" in after.reason, after


def test_a_refused_release_stays_refused_when_its_answer_is_read_from_this_machines_cache(farm):
    store, fleet, keys = farm
    pointer, _ = read_pointer(store, layout.release_key("mlp", GPU, TOOLCHAIN))
    store.delete(pointer.manifest)
    first, again = (status(store, fleet).cell("mlp", SIGNED_TARGET) for _ in range(2))
    assert (again.state, again.reason) == (first.state, first.reason) and first.state == "refused", again


def test_a_damaged_state_record_costs_reads_never_an_answer_and_is_named_with_its_fix(views):
    store, fleet = views
    truth = _states(status(store, fleet))
    record_states(store, fleet, by="test")
    key = layout.state_key("encoder")
    store.compare_and_swap(key, b'{"format": %d, "model": "encoder"}' % STATE_FORMAT, store.get(key).etag)
    found = status(store, fleet)
    assert _states(found) == truth and any("1 of 2 models" in n for n in found.notes), found.notes
    named = [p for p in found.problems if store.url(key) in p]
    assert len(named) == 1 and "not a recorded state" in named[0] and "trtfarm status --record" in named[0], named


def test_a_record_of_an_older_format_is_computed_again_and_named_as_nothing_wrong(views):
    """A record an older trtfarm wrote (its cells flat, format 1): the model is computed, no damage is named."""
    store, fleet = views
    truth = _states(status(store, fleet))
    record_states(store, fleet, by="test")
    key = layout.state_key("encoder")
    doc = json.loads(store.get(key).data)
    older = {**doc, "format": 1, "cells": {t: {"target_print": c["target_print"], **c["cell"]}
                                          for t, c in doc["cells"].items()}}
    store.compare_and_swap(key, json.dumps(older).encode(), store.get(key).etag)
    found = status(store, fleet)
    assert _states(found) == truth and found.problems == [], found.problems
    assert any("1 of 2 models" in n for n in found.notes), found.notes


def test_an_unsigned_record_is_not_read_where_keys_are_trusted_however_it_reads(farm):
    store, fleet, keys = farm
    record_states(store, fleet, by="forger", trust=keys["worker"])  # says signed, and signed by nobody
    key = layout.state_key("mlp")
    doc = json.loads(store.get(key).data)
    doc["cells"][SIGNED_TARGET]["cell"]["reason"] = "forged"
    store.compare_and_swap(key, json.dumps(doc).encode(), store.get(key).etag)
    assert status(store, fleet).cell("mlp", SIGNED_TARGET).reason == "forged"  # no keys: its words are read
    found = status(store, fleet, trust=keys["worker"])
    mlp = found.cell("mlp", SIGNED_TARGET)
    assert (mlp.state, mlp.signed) == ("released", "signed") and mlp.reason != "forged", mlp
    assert any("2 of 2 models" in n for n in found.notes), found.notes


def test_a_plan_rewritten_under_its_recorded_manifest_is_refused(views):
    store, fleet = views
    assert record_states(store, fleet, ["encoder"], by="test") == ["encoder"]
    assert {m: json.loads(store.get(layout.state_key(m)).data)["by"] == "test" for m in ("dedupe", "encoder")} == {
        "dedupe": False, "encoder": True}  # only the model asked (the runs recorded both)
    manifest = status(store, fleet).cell("encoder", "rtx4090-rtx1.7").manifest
    plan = layout.plan_key(layout.folder_of(manifest))
    blob = store.get(plan)
    store.compare_and_swap(plan, bytes(b ^ 1 for b in blob.data), blob.etag)  # the same size, other bytes
    cell = status(store, fleet).cell("encoder", "rtx4090-rtx1.7")
    assert (cell.state, cell.signed) == ("refused", "refused") and "was rewritten" in cell.reason, cell
    assert status(store, fleet).cell("encoder", "rtx5090-rtx1.7").state == "released"


def test_a_view_of_some_targets_has_only_their_cells_and_an_unknown_model_is_named_with_the_known(views):
    store, fleet = views
    found = status(store, fleet, targets=["rtx5090-rtx1.7"])
    assert found.targets == ["rtx5090-rtx1.7"] and {c.target for c in found.cells} == {"rtx5090-rtx1.7"}
    with pytest.raises(UserInputError) as refused:
        status(store, fleet, ["encoder", "nope"])
    assert "'nope'" in str(refused.value) and "known models: dedupe, encoder." in str(refused.value)


def test_a_warm_view_with_trusted_keys_reads_no_object_again(farm):
    store, fleet, keys = farm
    counted = CountingStore(store, Counter())
    for trust in (None, keys["worker"]):
        status(counted, fleet, trust=trust)  # cold: reads what it judges, and keeps what pull said of it
        counted.calls.clear()
        again = status(counted, fleet, trust=trust)
        assert {c.signed for c in _released(again)} == {"signed" if trust else "unverified"}
        assert [k for (method, k) in counted.calls if method == "get"] == [], counted.calls


def test_a_released_plan_object_gone_is_named_by_its_key(views):
    store, fleet = views
    manifest = status(store, fleet).cell("encoder", "rtx5090-rtx1.7").manifest
    plan = layout.plan_key(layout.folder_of(manifest))
    store.delete(plan)
    cell = status(store, fleet).cell("encoder", "rtx5090-rtx1.7")
    assert cell.state in ("refused", "damaged") and plan in cell.reason, cell


def test_a_state_this_machine_computed_answers_again_only_while_nothing_it_was_computed_from_changed(views, tmp_path):
    """Without state records in the store, a view keeps what it computed; a changed object or fleet is computed."""
    store, fleet = views
    for key in list(store.list("state/")):
        store.delete(key)
    (tmp_path / "imaged.yaml").write_text(IMAGED)

    def cells(found):
        return [c.to_json() | {"age_s": None} for c in found.cells]

    for proposed in (fleet, load_fleet(tmp_path / "imaged.yaml")):
        truth = status(store, proposed, cache=False)
        assert cells(status(store, proposed)) == cells(truth)  # computed, and kept
        assert cells(status(store, proposed)) == cells(truth)  # read from what this machine kept
    assert status(store, fleet).cell("encoder", "rtx4090-rtx1.7").state == "released"
    refused = status(store, load_fleet(tmp_path / "imaged.yaml")).cell("encoder", "rtx4090-rtx1.7")
    assert refused.state == "refused" and "serve:old" in refused.reason, refused
    # an object changed since: computed from the store again
    key = status(store, fleet).cell("encoder", "rtx3090-rtx1.7-o5").manifest
    doc = json.loads(store.get(key).data)
    doc["verification"]["engine"] = {**doc["verification"]["engine"], "status": "failed", "detail": "diff 3.2"}
    store.compare_and_swap(key, json.dumps(doc).encode(), store.get(key).etag)
    assert status(store, fleet).cell("encoder", "rtx3090-rtx1.7-o5").state == "failed"


def test_a_state_record_s_releases_are_judged_again_under_other_serving_images(views, tmp_path):
    store, fleet = views
    assert record_states(store, fleet, by="test") == ["dedupe", "encoder"]
    (tmp_path / "imaged.yaml").write_text(IMAGED)
    imaged = load_fleet(tmp_path / "imaged.yaml")
    found = status(store, imaged)
    assert [c.to_json() | {"age_s": None} for c in found.cells] == [
        c.to_json() | {"age_s": None} for c in status(store, imaged, cache=False).cells]
    refused = found.cell("encoder", "rtx4090-rtx1.7")
    assert refused.state == "refused" and "serve:old" in refused.reason, refused
    assert found.cell("encoder", "rtx3090-rtx1.7-o5").state == "pending"  # no release: the record's word stands
