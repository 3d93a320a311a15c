"""`trtfarm status` of a target that has only a candidate: it waits for promotion, not for its engine check.

Each model's first and only build declares ``promotion:``, so it goes to the candidate pointer and stable has nothing
yet; the target's line names the gate it waits on and the command that moves it, in the text and in --json. The
encoder asks for two receipts (its canary gate waits); ``encoder-soon`` for none (its gates hold).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from trtfarm.state.cells import in_candidate
from trtfarm.vocabulary.fleetview import TargetStatus

from . import forkcli
from .fleet_store import encoder_export
from .fleets import ONE_RTX_TARGET

TARGET = "rtx-4090-rtx1.7"
PROMOTIONS = {"encoder": "promotion: {receipts: 2, soak_s: 0}\n",
              "encoder-soon": "promotion: {receipts: 0, soak_s: 0}\n"}


@pytest.fixture(scope="module")
def candidate_only(tmp_path_factory):
    """A store where each model's one build (promotion: declared) is its candidate, and nothing is stable."""
    root = tmp_path_factory.mktemp("candidate-only")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": "",
           "TRTFARM_STORE": str(root / "store"), "TRTFARM_TARGETS": str(fleet),
           "TRTFARM_ACCEPTED_RELEASES": str(root / "accepted.json")}
    for seed, (model, promotion) in enumerate(PROMOTIONS.items()):
        export = encoder_export(root / model, seed, name=model)
        (export / "farm.yaml").write_text((export / "farm.yaml").read_text() + promotion)
        built = run(env, "build", str(export / "model.onnx"))
        assert "released to candidate:" in " ".join(built.stdout.split()), built.stdout
    return env


def run(env, *args) -> subprocess.CompletedProcess:
    proc = forkcli.trtfarm(args, env=env, cwd=env["TRTFARM_STORE"].rsplit("/", 1)[0], timeout=300)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _cell(env, model: str) -> dict:
    [cell] = [c for c in json.loads(run(env, "status", "--json").stdout) if c["model"] == model]
    return cell


def test_a_candidate_only_target_waits_for_promotion_on_its_gate_not_for_its_engine_check(candidate_only):
    cell = _cell(candidate_only, "encoder")
    assert cell["state"] == "pending" and cell["candidate"]["verdict"] == "waits", cell
    assert cell["reason"] == ("in candidate, not stable: waits for promotion on its canary gate (0 of 2 ok "
                              "receipts); trtfarm promote encoder moves it to stable once its gates hold"), cell
    text = " ".join(run(candidate_only, "status", "encoder").stdout.split())
    assert f"pending {TARGET} of encoder: in candidate, not stable: waits for promotion on its canary gate (0 of 2 " \
           "ok receipts); trtfarm promote encoder moves it to stable once its gates hold" in text, text
    assert "engine check pending on" not in text.split("not a target of the model", 1)[1], text
    assert "pend waiting for its engine check or, in candidate, for promotion" in text, text


def test_a_candidate_whose_gates_hold_says_promote_moves_it(candidate_only):
    cell = _cell(candidate_only, "encoder-soon")
    assert cell["state"] == "pending" and cell["candidate"]["verdict"] == "holds", cell
    assert cell["reason"] == "in candidate, not stable: its promotion gates hold; trtfarm promote encoder-soon " \
                             "moves it to stable", cell
    text = " ".join(run(candidate_only, "status", "encoder-soon").stdout.split())
    assert f"pending {TARGET} of encoder-soon: in candidate, not stable: its promotion gates hold" in text, text


def test_a_candidate_that_fails_a_gate_names_it_and_that_promote_will_not_move_it():
    manifest = "plans/encoder/cc482ca9bebb/rtx-4090/tensorrt_rtx-1.7.1.116/e48ed8a49149/manifest.json"
    pending = TargetStatus("encoder", TARGET, "pending", "engine check pending on NVIDIA GeForce RTX 4090",
                           manifest=manifest)
    failed = in_candidate(pending, manifest, "fails", [("canary", "1 failed receipt(s), first from serving-1: CUDA "
                                                                  "error 700 on load")])
    assert failed.reason == ("in candidate, not stable: promotion fails on its canary gate (1 failed receipt(s), "
                             "first from serving-1: CUDA error 700 on load); `trtfarm promote encoder` will not move "
                             "it to stable")
    two = in_candidate(pending, manifest, "waits", [("accuracy", "int8 has no accuracy verdict"),
                                                     ("canary", "0 of 2 ok receipts")])
    assert "on its accuracy and canary gates (accuracy: int8 has no accuracy verdict; canary: 0 of 2" in two.reason
    assert in_candidate(pending, "plans/an/older/build/manifest.json", "waits", []) == pending  # not its build
    assert in_candidate(pending, manifest, "already", []) == pending
