"""The release pointer's schema (1 read as an unsigned release, a newer one refused) and who signs each move of it.

In process, on the fast farm of made-up plan bytes (tests/chain_farm.py): the release of a plan a killed run left
unreleased (planning decides it, reading only; the executor carries it out), the listed path a farm run takes, the
repair of a damaged pointer. Where the process has a signing
key every move carries a signed claim; without one the move is unsigned, and `trtfarm sign` signs it later.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from trtfarm import layout
from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.executor import settle
from trtfarm.planning.plan import ExportWork
from trtfarm.planning.triage import Triage, triage, triage_listed
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import list_pointers, read_pointer, repair_pointer, seen_pointer
from trtfarm.publishing.release_check import check_release
from trtfarm.publishing.sign_store import sign_store
from trtfarm.releases.moves import move_release
from trtfarm.signing.release_claim import unverified_claim, verify_release
from trtfarm.state.run_view import RunView
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.pointer import POINTER_SCHEMA, PointerInvalid, PointerTooNew, pointer_from_json
from trtfarm.vocabulary.targets import TargetWork

from .chain_farm import T0, T1, TC, Farm, refused
from .fleets import ONE_RTX_TARGET

KEY = layout.release_key("enc", "rtx-4090", TC)


@pytest.fixture
def farm(tmp_path):
    return Farm(tmp_path / "farm")


def _schema_1(pointer) -> bytes:
    """The pointer as a trtfarm before signed releases wrote it: schema 1, no version, no claim."""
    doc = json.loads(pointer.to_json())  # schema 2 for a stable pointer
    del doc["version"], doc["claim"]
    return json.dumps({**doc, "schema_version": 1}, indent=2).encode()


def _plan(farm: Farm, tmp_path, exported: str = T1) -> TargetWork:
    """The fleet's rtx-4090 target, planned onto the farm's enc build of ``exported`` (what planning computes)."""
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    target = select_targets(load_fleet(tmp_path / "gpu_targets.yaml"), None)[0]
    key = farm.keys["enc", "rtx-4090", exported]
    m = read_stored(farm.store, key).manifest
    return TargetWork(target, m.build.build_digest, layout.folder_of(key), None, KEY)


def _carried_out(farm: Farm, found: Triage, signer=None) -> dict:
    """What the executor does with planning's decisions: each released target's outcome (planning moved nothing)."""
    before = farm.store.get(KEY)
    assert found.releases and not found.todo, found
    assert (farm.store.get(KEY) or None) == before  # deciding wrote nothing
    plan = ExportWork(name="enc", model=None, targets=list(found.done), outcomes=found.done,
                      releases=found.releases, withdrawals=found.withdrawals)
    return {o.target: o for o in settle(farm.store, plan, signer).outcomes}


def _signed_by(farm: Farm, pointer) -> int:
    """The version of ``pointer``'s claim, checked against the farm's trusted key."""
    key, claim = verify_release(pointer.claim, farm.trust)
    assert key.hint == farm.signer.hint and claim.manifest == pointer.manifest
    return claim.version


def test_a_schema_1_pointer_reads_as_an_unsigned_release_of_version_0(farm):
    enc, _ = farm.pointer()
    farm.put_pointer(_schema_1(enc))
    old, _ = farm.pointer()
    assert (old.schema_version, old.version, old.claim, old.manifest) == (POINTER_SCHEMA, 0, None, enc.manifest)
    assert farm.pull("plain", trust=False, memory=False).release.claim is None  # no keys: unsigned-checked
    err = refused("unsigned release", "carries no signed release, and verification is on", farm.pull)
    assert "`trtfarm sign`" in str(err) and "\n" not in str(err)
    assert sign_store(farm.store, farm.signer, ["enc"]).releases == [KEY]
    signed, _ = farm.pointer()
    # a stable pointer that uses nothing of schema 3 is written as schema 2: older serving hosts keep reading it
    assert json.loads(farm.store.get(KEY).data)["schema_version"] == 2 < POINTER_SCHEMA
    assert (signed.version, _signed_by(farm, signed), signed.current.action) == (1, 1, "refresh")
    assert farm.pull().release.claim.version == 1


def test_a_release_over_a_schema_1_pointer_is_signed_as_version_1(farm):
    enc, _ = farm.pointer()
    farm.put_pointer(_schema_1(enc))
    key = farm.keys["enc", "rtx-4090", T0]
    moved = move_release(farm.store, key, read_stored(farm.store, key).manifest, release_on="built", reason="back",
                         rollback=True, signer=farm.signer)
    assert (moved.version, _signed_by(farm, moved), len(moved.history)) == (1, 1, len(enc.history) + 1)


@pytest.mark.parametrize("schema", [POINTER_SCHEMA + 1, 99])
def test_a_newer_pointer_schema_is_one_line_naming_the_upgrade_and_is_never_repaired(farm, tmp_path, schema):
    enc, _ = farm.pointer()
    newer = json.dumps({**json.loads(enc.model_dump_json()), "schema_version": schema, "threshold": 2}).encode()
    farm.put_pointer(newer)
    for call in (lambda: read_pointer(farm.store, KEY), farm.pull, lambda: repair_pointer(farm.store, KEY, "built",
                                                                                          farm.signer),
                 lambda: seen_pointer(farm.store, KEY), lambda: list_pointers(farm.store, "enc", problems=[]),
                 lambda: triage(farm.store, [_plan(farm, tmp_path)])):
        with pytest.raises(PointerTooNew) as err:
            call()
        text = str(err.value)
        assert isinstance(err.value, UserInputError) and "\n" not in text
        assert f"release pointer schema {schema} is newer than this trtfarm understands ({POINTER_SCHEMA}); " \
               "upgrade trtfarm." in text and text.startswith(farm.store.url(KEY))
    assert farm.store.get(KEY).data == newer  # read, refused, never rewritten as damage
    assert not (farm.root / "host").exists()


@pytest.mark.parametrize("doc, why", [
    ({"schema_version": 1, "version": 3}, "schema 1 has no version (schema 2 fields)"),
    ({"schema_version": 1, "claim": None, "version": 1}, "schema 1 has no claim or version"),
    ({"schema_version": "2"}, "schema_version '2' is not a number"),
    ({"schema_version": True}, "schema_version True is not a number"),
    ({"schema_version": None}, "no schema_version"),
    ({"schema_version": 0}, "schema 0 is no release pointer schema trtfarm ever wrote"),
    ({"schema_version": 2, "version": -1}, "version: Input should be greater than or equal to 0"),
    ({"schema_version": 2, "version": None}, "version: Input should be a valid integer"),
    ({"schema_version": 2, "version": 1, "extra": 1}, "extra: Extra inputs are not permitted"),
    ({"schema_version": 2, "channel": "stable"}, "schema 2 has no channel (schema 3 fields)"),
    ({"schema_version": 3, "channel": "beta"}, "channel: Input should be 'stable' or 'candidate'"),
    ({"schema_version": 3, "promotion": {"receipts": -1}}, "promotion.receipts: Input should be greater than"),
])
def test_a_pointer_of_a_known_schema_with_wrong_fields_is_damaged(farm, doc, why):
    enc, _ = farm.pointer()
    base = json.loads(_schema_1(enc) if doc["schema_version"] == 1 else enc.to_json() if doc["schema_version"] == 2
                      else enc.model_dump_json())
    farm.put_pointer(json.dumps({**base, **doc}).encode())
    with pytest.raises(CorruptObject, match="not a release pointer") as err:
        read_pointer(farm.store, KEY)
    assert why in str(err.value), str(err.value)
    for data, why in ((b"[1]", "not a JSON object"), (b"\xff{", "not a JSON object"), (b"{}", "no schema_version")):
        with pytest.raises(PointerInvalid, match=why):
            pointer_from_json(data)


def test_the_executor_signs_the_release_planning_decided_for_a_plan_a_killed_run_left_unreleased(farm, tmp_path):
    farm.store.delete(KEY)  # published, then killed before the release
    plan = _plan(farm, tmp_path)
    done = _carried_out(farm, triage(farm.store, [plan]), farm.signer)
    release = done[plan.target.id].release
    assert (release.action, release.key, release.old) == ("moved", KEY, "nothing") and release.new.startswith("enc/")
    assert str(release).startswith(f"released: {KEY}: nothing -> enc/")
    pointer, _ = farm.pointer()
    assert pointer.manifest == plan.manifest_key and _signed_by(farm, pointer) == pointer.version == 1
    assert farm.pull().release.claim.version == 1
    farm.store.delete(KEY)  # the farm's path: the listings say there is no pointer
    view = RunView(farm.store, load_fleet(tmp_path / "gpu_targets.yaml"))  # the run's read model of the store
    done = _carried_out(farm, triage_listed(farm.store, [replace(plan, pointer=None)], view), farm.signer)
    assert done[plan.target.id].release.action == "moved"
    again, _ = farm.pointer()
    assert _signed_by(farm, again) == again.version == 1 and again.manifest == plan.manifest_key


def test_a_run_without_a_key_releases_unsigned_and_sign_signs_it_later(farm, tmp_path):
    farm.store.delete(KEY)
    plan = _plan(farm, tmp_path)
    view = RunView(farm.store, load_fleet(tmp_path / "gpu_targets.yaml"))
    done = _carried_out(farm, triage_listed(farm.store, [plan], view))
    assert str(done[plan.target.id].release).startswith("released: ")
    pointer, _ = farm.pointer()
    assert (pointer.claim, pointer.version) == (None, 1)
    assert "`trtfarm sign`" in str(refused("unsigned release", "carries no signed release", farm.pull))
    sign_store(farm.store, farm.signer, ["enc"])
    signed, _ = farm.pointer()
    assert _signed_by(farm, signed) == 2 and farm.pull().release.claim.action == "refresh"


def test_a_damaged_pointer_is_repaired_signed_by_a_process_with_a_key(farm, tmp_path):
    farm.store.compare_and_swap(KEY, b"{not json", farm.store.get(KEY).etag)
    done = _carried_out(farm, triage(farm.store, [_plan(farm, tmp_path)]), farm.signer)
    release = next(iter(done.values())).release
    note = release.repaired
    assert note.startswith(f"repaired the damaged pointer {KEY}") and "signed as version 1" in note, note
    assert str(release).startswith(note)
    pointer, _ = farm.pointer()
    assert _signed_by(farm, pointer) == 1 and pointer.manifest == farm.keys["enc", "rtx-4090", T1]
    assert farm.pull(memory=False).verdict.ok is True
    farm.store.compare_and_swap(KEY, b"{not json", farm.store.get(KEY).etag)
    unsigned = repair_pointer(farm.store, KEY, "built")
    assert "signed" not in unsigned and farm.pointer()[0].claim is None


def test_a_signed_repair_names_only_what_the_signer_vouches_for_never_the_damaged_history(farm):
    enc, _ = farm.pointer()
    old = farm.keys["enc", "rtx-4090", T0]
    doc = json.loads(enc.model_dump_json())
    doc["history"][-1]["manifest"] = old  # a bucket writer's "damaged" pointer whose history goes back a month
    del doc["model"]
    damaged = json.dumps({**doc, "version": 7}).encode()
    farm.put_pointer(damaged)
    assert "rewritten from its history to " + old in repair_pointer(farm.store, KEY, "built")  # unsigned: history
    farm.put_pointer(damaged)
    note = repair_pointer(farm.store, KEY, "built", farm.signer)
    assert "rewritten from the newest manifest" in note and "signed as version 8" in note, note
    pointer, _ = farm.pointer()
    assert pointer.manifest == farm.keys["enc", "rtx-4090", T1] and _signed_by(farm, pointer) == 8
    assert pointer.history[-2].manifest == old and pointer.current.reason.startswith("repaired: ")
    verdict = check_release(farm.store, KEY, pointer, read_stored(farm.store, pointer.manifest), farm.trust)
    assert unverified_claim(pointer.claim) == verdict.claim
    newest = farm.keys["enc", "rtx-4090", T1]
    copied = read_stored(farm.store, newest).manifest_bytes
    for key in (newest, old):  # the newest manifest, copied over the older one's: in a folder not its own
        farm.store.delete(key)
    farm.store.put_if_absent(old, copied)
    farm.put_pointer(damaged)
    assert repair_pointer(farm.store, KEY, "built", farm.signer).startswith(f"removed the damaged pointer {KEY}")
    assert farm.store.get(KEY) is None
