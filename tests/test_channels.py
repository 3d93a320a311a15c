"""Release channels end to end on a real store: build -> candidate, receipts, promote, a failed receipt rolls
stable back, the history, a promotion race; every step through the command line as a serving team runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from trtfarm import layout
from trtfarm.publishing.release import ChannelRefused
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases.channels import promote_move
from trtfarm.store import open_store

from . import forkcli
from .fleet_store import encoder_export
from .fleets import ONE_RTX_TARGET

TARGET = "rtx-4090-rtx1.7"
STABLE = "releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json"
CANDIDATE = "candidates/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json"
PROMOTION = "promotion: {receipts: 2, soak_s: 0, on_failed_receipt: rollback}\n"


@pytest.fixture(scope="module")
def channels(tmp_path_factory):
    """A store where build 0 is stable (no promotion: yet) and build 1 (promotion: declared) is the candidate."""
    root = tmp_path_factory.mktemp("channels")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": "",
           "TRTFARM_STORE": str(root / "store"), "TRTFARM_TARGETS": str(fleet),
           "TRTFARM_ACCEPTED_RELEASES": str(root / "accepted.json")}
    first = encoder_export(root / "enc0", 0)
    second = encoder_export(root / "enc1", 1)
    (second / "farm.yaml").write_text((second / "farm.yaml").read_text() + PROMOTION)
    builds = [run(env, "build", str(first / "model.onnx")), run(env, "build", str(second / "model.onnx"))]
    return root, env, builds


def run(env, *args, code: int | None = 0) -> subprocess.CompletedProcess:
    """``trtfarm ARGS``; its exit must be ``code`` (None: promote's 0, 1 or 3, whatever the gates say now)."""
    proc = forkcli.trtfarm(args, env=env, cwd=env["TRTFARM_STORE"].rsplit("/", 1)[0], timeout=300)
    assert proc.returncode == code or code is None and proc.returncode in (0, 1, 3), \
        f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTX_4090 = "NVIDIA GeForce RTX 4090:8.9:24.0"


def receipt(env, host: str, *args, code: int = 0, gpu: str = RTX_4090) -> subprocess.CompletedProcess:
    """``trtfarm receipt`` from a serving host: its own hostname (a UTS namespace) and GPU (the NVML stand-in)."""
    host_env = {**env, "PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml") + os.pathsep + REPO,
                "FAKE_NVML_GPUS": gpu}
    proc = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, sys.executable, "-m",
                           "trtfarm", "receipt", "encoder", "--target", TARGET, *args], capture_output=True,
                          text=True, timeout=300, env=host_env, cwd=env["TRTFARM_STORE"].rsplit("/", 1)[0])
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _pointer(env, key):
    return read_pointer(open_store(env["TRTFARM_STORE"]), key)[0]


def _pulled_sha(env, root, channel: str) -> str:
    doc = json.loads(run(env, "pull", "encoder", "--gpu", "rtx-4090", "--toolchain", "tensorrt_rtx-1.7.1.116",
                         "--channel", channel, "--to", str(root / f"{channel}.plan"), "--json").stdout)
    with open(doc["manifest"]) as f:
        return json.load(f)["plan"]["sha256"]


def test_a_build_with_promotion_lands_in_candidate_and_stable_serves_the_previous_plan(channels):
    root, env, builds = channels
    assert "released to candidate:" in " ".join(builds[1].stdout.split()), builds[1].stdout
    stable, candidate = _pointer(env, STABLE), _pointer(env, CANDIDATE)
    assert stable.manifest != candidate.manifest and candidate.channel == "candidate" and candidate.promotion
    assert json.loads(open_store(env["TRTFARM_STORE"]).get(STABLE).data)["schema_version"] == 2  # older hosts read it
    assert _pulled_sha(env, root, "stable") == stable.plan_sha256
    assert _pulled_sha(env, root, "candidate") == candidate.plan_sha256


def test_status_shows_the_channels_side_by_side_as_promote_judges_them(channels):
    _, env, _ = channels
    stable, candidate = _pointer(env, STABLE), _pointer(env, CANDIDATE)
    [cell] = json.loads(run(env, "status", "--json").stdout)
    assert cell["state"] == "released" and cell["manifest"] == stable.manifest
    assert cell["candidate"] == {"build": layout.short_ref(candidate.manifest), "verdict": "waits",
                                 "detail": "canary: 0 of 2 ok receipts"}, cell
    text = " ".join(run(env, "status", "encoder").stdout.split())
    build = candidate.manifest.split("/")[-2]
    assert f"candidate {TARGET} of encoder: {build} waits (stable {stable.manifest.split('/')[-2]}): canary: 0 of 2" \
        in text, text
    [row] = json.loads(run(env, "promote", "encoder", "--json", code=3).stdout)  # the same verdict and gates
    assert row["verdict"] == cell["candidate"]["verdict"] and not row["promoted"]


def test_receipts_gate_the_promotion_and_a_failed_stable_receipt_rolls_it_back(channels):
    root, env, _ = channels
    before, candidate = _pointer(env, STABLE), _pointer(env, CANDIDATE)
    waits = json.loads(run(env, "promote", "encoder", "--json", code=3).stdout)  # 3: gates wait
    assert [(r["verdict"], r["promoted"]) for r in waits] == [("waits", False)]
    assert {g["gate"]: g["verdict"] for g in waits[0]["gates"]}["canary"] == "waits"
    assert _pointer(env, STABLE).manifest == before.manifest  # nothing moved
    for host in ("canary-1", "canary-1", "canary-2"):  # one host twice counts once
        receipt(env, host, "--channel", "candidate", "--ok", "--latency-ms", "1.5")
        if host == "canary-1":
            assert "1 of 2 ok receipts" in run(env, "promote", "encoder", code=3).stdout
    text = " ".join(run(env, "promote", "encoder").stdout.split())
    assert "promoted" in text and "2 ok receipts" in text, text
    assert _pointer(env, STABLE).manifest == candidate.manifest
    failed = receipt(env, "serving-1", "--failed", "CUDA error 700 on load", "--plan", candidate.plan_sha256)
    assert "rolled back:" in failed.stdout, failed.stdout
    after = _pointer(env, STABLE)
    assert after.manifest == before.manifest and after.current.action == "rollback"
    assert _pulled_sha(env, root, "stable") == before.plan_sha256
    events = json.loads(run(env, "history", "encoder", "--json").stdout)
    actions = [(e["channel"], e["action"]) for e in events]
    assert actions[-2:] == [("stable", "promote"), ("stable", "rollback")], actions
    assert ("candidate", "release") in actions and ("stable", "release") in actions
    assert all({"action", "channel", "at", "build"} <= e.keys() for e in events)
    again = json.loads(run(env, "promote", "encoder", "--json", code=1).stdout)  # the failed plan stays out
    assert again[0]["verdict"] == "fails" and not again[0]["promoted"], again


def test_two_racing_promotions_leave_one_winner_and_one_history(channels):
    root, env, _ = channels
    store = open_store(env["TRTFARM_STORE"])
    candidate = _pointer(env, CANDIDATE)
    before = len(_pointer(env, STABLE).history)
    results: list[object] = []

    def go():
        try:
            results.append(promote_move(store, candidate, {"canary": "forced"}, reason="race", force=False))
        except ChannelRefused as lost:
            results.append(lost)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lost = [r for r in results if isinstance(r, ChannelRefused)]
    assert len(lost) == 1 and "already at" in str(lost[0]), results
    after = _pointer(env, STABLE)
    assert after.manifest == candidate.manifest and len(after.history) == before + 1


@pytest.mark.parametrize("args, code, words", [
    (["promote", "encodr"], 2, "did you mean"),
    (["promote", "encoder", "--target", "nope"], 2, "unknown target"),
    (["rollback", "encoder", "--channel", "beta"], 2, "use stable or candidate"),
    (["receipt", "encoder", "--target", TARGET, "--ok", "--failed", "x"], 2, "one of them"),
    (["receipt", "encoder", "--target", TARGET, "--channel", "candidate", "--ok", "--plan", "0" * 64], 2,
     "was never in the candidate channel"),
    (["receipt", "encoder", "--target", TARGET, "--failed", "x"], 2, "--failed needs --plan"),
    (["receipt", "encoder", "--target", TARGET, "--ok"], 2, "named no NVIDIA GPU"),  # this machine has none
    (["receipt", "encoder", "--target", TARGET, "--ok", "--load-ms", "fast"], 2, "--load-ms"),
    (["rollback", "encoder", "--channel", "candidate"], 1, "has no earlier good release"),  # one move, nothing before
])
def test_bad_input_is_one_line_with_its_exit_code(channels, args, code, words):
    _, env, _ = channels
    proc = run(env, *args, code=code)
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr


def test_a_channel_pointer_copied_into_another_channel_is_refused(channels, tmp_path):
    root, env, _ = channels
    store = open_store(env["TRTFARM_STORE"])
    saved = store.get(STABLE)
    candidate = store.get(CANDIDATE).data
    store.compare_and_swap(STABLE, candidate, saved.etag)  # candidate swapped into stable
    try:
        proc = run(env, "pull", "encoder", "--gpu", "rtx-4090", "--toolchain", "tensorrt_rtx-1.7.1.116",
                   "--to", str(tmp_path / "x.plan"), code=1)
        assert "candidate channel" in proc.stderr and not (tmp_path / "x.plan").exists(), proc.stderr
    finally:
        store.compare_and_swap(STABLE, saved.data, store.get(STABLE).etag)
    assert layout.parse_channel_key(CANDIDATE)[1] == "candidate"


def test_gc_keeps_the_plans_of_both_channels(channels):
    from trtfarm.publishing.gc import plans_to_delete
    from trtfarm.state.views import release_references

    _, env, _ = channels
    store = open_store(env["TRTFARM_STORE"])
    kept = {_pointer(env, STABLE).manifest, _pointer(env, CANDIDATE).manifest}
    doomed = {d.manifest_key for d in plans_to_delete(store, 0, release_references(store, cache=False))}
    assert doomed and not kept & doomed, doomed  # an older build goes; neither channel's plan does


@pytest.mark.parametrize("args, most", [(["promote", "encoder"], 6), (["history", "encoder"], 5),
                                        (["status", "encoder"], 14)])
def test_promote_history_and_status_fit_80_columns(channels, args, most):
    """At 80 columns: promote 5 lines (a verdict line and its four gates; a failed receipt's reason may fold onto a
    sixth), history a heading and two lines per
    move (5 after the two builds), status 14 with the candidate beside stable."""
    _, env, _ = channels
    text = run({**env, "COLUMNS": "80"}, *args, code=None).stdout
    lines = text.rstrip("\n").splitlines()
    if args[0] == "history":  # the moves so far: the tests before this one made more than the two builds
        most = 1 + 3 * len(json.loads(run(env, "history", "encoder", "--json").stdout))  # a long reason folds once
    assert max(map(len, lines)) <= 80 and len(lines) <= most, text
