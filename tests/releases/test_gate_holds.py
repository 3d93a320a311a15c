"""Nothing unjudged is released (issue 57): a release whose plan's precision gate is not passed is held by the rules.

``rules.decide`` reads the gate's verdict as evidence: ``not judged`` and ``failed`` hold a release (a Stay, nothing
moves) unless the request carries an override (a build's ``--release``, or ``--force``), recorded as ``forced`` with
the gate in the event; ``passed`` and bf16's ``not verified`` release as before. The moves, the build's release step
and ``trtfarm release`` all ask it.
"""

from __future__ import annotations

import pytest

from trtfarm.building.release_move import release_if_allowed
from trtfarm.layout import short_ref
from trtfarm.publishing.release import ReleaseRefused
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases import rules
from trtfarm.releases.channels import channel_history
from trtfarm.releases.moves import move_release, release_manifest
from trtfarm.store import open_store
from trtfarm.vocabulary.plan_gate import plan_gate

from .ledger_store import STABLE, Exports, gated

GATES = {1: "not judged", 2: "not verified", 3: "failed"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    return Exports.publish(tmp_path_factory.mktemp("gate-holds"), 4, GATES)


@pytest.mark.parametrize("verdict, moves", [("passed", True), ("not verified", True), ("not judged", False),
                                            ("failed", False), ("something new", False)])
def test_the_rules_release_only_a_passed_or_not_verified_gate_without_an_override(verdict, moves):
    ledger = [rules.Entry(1, "release", "a")]
    decided = rules.decide(ledger, rules.ReleaseTo("b"), rules.Evidence(gate=verdict))
    assert isinstance(decided, rules.Move if moves else rules.Stay)
    if not moves:
        assert (decided.kind, decided.refused, decided.served) == ("held", True, "a")
        assert verdict in decided.detail
    for override in (rules.ReleaseTo("b", override=True), rules.ReleaseTo("b", force=True)):
        moved = rules.decide(ledger, override, rules.Evidence(gate=verdict))
        assert moved == rules.Move("release" if moves and not override.force else "forced", "b", "a")


def test_an_override_keeps_the_other_rules_an_older_export_and_a_served_plan():
    ledger = [rules.Entry(1, "release", "new")]
    held = rules.Evidence(gate="not judged")
    assert rules.decide(ledger, rules.ReleaseTo("old", older=True, override=True), held).kind == "older"
    assert rules.decide(ledger, rules.ReleaseTo("new", override=True), held).kind == "already"
    assert rules.decide(ledger, rules.ReleaseTo("old", older=True, rollback=True, override=True), held) == \
        rules.Move("forced", "old", "new")


def test_the_gate_is_read_from_the_manifest_with_the_output_it_rests_on(exports, tmp_path):
    store = open_store(exports.fresh(tmp_path / "s"))
    gates = [plan_gate(exports.manifest(store, i)) for i in range(4)]
    assert [g.verdict for g in gates] == ["passed", "not judged", "not verified", "failed"]
    assert gates[1].text() == "fp16 gate not judged (output 'y' is the same for every input)"
    assert gates[3].text() == "fp16 gate failed (y: max error 0.5 is above 0.01)"
    m = exports.manifest(store, 0)
    old = m.model_copy(update={"precision": m.precision.model_copy(update={"recipe": "bf16", "accuracy": {
        "mode": "bf16", "passed": None}})})  # recorded before verdicts had names: bf16's None is not verified
    assert plan_gate(old).verdict == "not verified"
    assert plan_gate(gated(m, "not judged").model_copy(update={"precision": m.precision.model_copy(
        update={"recipe": "int8", "accuracy": None})})).verdict == "not judged"  # converted, no record: not judged


def test_a_held_release_moves_nothing_and_an_override_is_recorded_with_the_gate(exports, tmp_path):
    store = open_store(exports.fresh(tmp_path / "s"))
    move_release(store, exports.keys[0], exports.manifest(store, 0), release_on="built", reason="built")
    for i in (1, 3):
        with pytest.raises(ReleaseRefused, match=f"not released: fp16 gate {GATES[i]} .*--heldout.*--force"):
            move_release(store, exports.keys[i], exports.manifest(store, i), release_on="built", reason="built")
        held = release_manifest(store, exports.keys[i], exports.manifest(store, i), release_on="built", reason="b")
        assert (held.decision.kind, held.moved, held.after) == ("held", False, held.before)
    assert read_pointer(store, STABLE)[0].manifest == exports.keys[0]
    move_release(store, exports.keys[1], exports.manifest(store, 1), release_on="built", reason="asked",
                 override=True, by="alice@ops")
    move_release(store, exports.keys[2], exports.manifest(store, 2), release_on="built", reason="bf16")
    events = [h.event for h in channel_history(store, "enc")]
    assert [(e.action, exports.index(e.manifest)) for e in events] == [("release", 0), ("forced", 1),
                                                                       ("release", 2)]
    forced = events[1]
    assert forced.by == "alice@ops" and forced.reason.startswith("asked; fp16 gate not judged")
    assert forced.gates == {"accuracy": "fp16 gate not judged (output 'y' is the same for every input): released "
                                        "anyway"}
    assert events[0].gates is None and events[2].gates is None
    move_release(store, exports.keys[3], exports.manifest(store, 3), release_on="built", reason="by hand", force=True)
    last = channel_history(store, "enc")[-1].event  # `trtfarm release REF --force`: the same override, recorded
    assert (last.action, last.gates) == ("forced", {"accuracy": "fp16 gate failed (y: max error 0.5 is above 0.01): "
                                                                "released anyway"})


def test_a_build_publishes_a_held_plan_as_a_trial_and_releases_it_with_release(exports, tmp_path):
    store = open_store(exports.fresh(tmp_path / "s"))
    m = exports.manifest(store, 1)
    kept = release_if_allowed(store, exports.keys[1], m, "built", "run-1")
    assert (kept.action, kept.old, kept.held_by) == ("kept", "nothing", "precision gate not judged")
    assert "published as a trial: fp16 gate not judged (output 'y'" in kept.why and "--heldout" in kept.fix
    assert f"`trtfarm release {short_ref(exports.keys[1])} --force --reason ...`" in kept.fix  # the farm's way too
    assert "--release" in str(kept) and read_pointer(store, STABLE)[0] is None
    moved = release_if_allowed(store, exports.keys[1], m, "built", "run-2", override=True)
    assert moved.action == "moved"
    [event] = [h.event for h in channel_history(store, "enc")]
    assert event.action == "forced" and event.reason.startswith("built by run run-2; released anyway with --release")
    assert event.by != "trtfarm"  # who asked for the override
    passed = release_if_allowed(store, exports.keys[2], exports.manifest(store, 2), "built", "run-3", override=True)
    assert passed.action == "moved"  # --release of a plan the gate does not hold is a plain release by trtfarm
    assert [(h.event.action, h.event.by) for h in channel_history(store, "enc")][-1] == ("release", "trtfarm")
