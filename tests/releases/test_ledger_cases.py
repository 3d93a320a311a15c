"""The cases issue 56 names, each on a real store: rollbacks that go further back, one rollback for N hosts
reporting one bad plan from separate processes (file and moto's S3), receipts from a GPU that cannot serve the plan,
one host counted once, and a history whose stored strings print as one line each."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from trtfarm.errors import MismatchError, UserInputError
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases.channels import channel_history, record_receipt, rollback_channel, serving_key
from trtfarm.releases.gates import candidates
from trtfarm.releases.ledger import one_line
from trtfarm.releases.moves import move_release
from trtfarm.releases.receipts import new_receipt
from trtfarm.store import open_store

from .ledger_store import CANDIDATE, NAME, POLICY, STABLE, Exports, host


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    return Exports.publish(tmp_path_factory.mktemp("ledger-cases"), 4)


def _release(store, exports, i, channel="stable"):
    move_release(store, exports.keys[i], exports.manifest(store, i), release_on="built", reason="built",
                 channel=channel, promotion=POLICY if channel == "candidate" else None)


def _stable(store, exports):
    return exports.index(read_pointer(store, STABLE)[0].manifest)


def test_a_second_rollback_goes_further_back_and_a_third_refuses(exports, tmp_path):
    store = open_store(exports.fresh(tmp_path / "s"))
    for i in range(3):
        _release(store, exports, i)
    back = [rollback_channel(store, STABLE, reason="bad") and _stable(store, exports) for _ in range(2)]
    assert back == [1, 0]  # v3 -> v2 -> v1, never back to v3
    with pytest.raises(MismatchError, match="no earlier good release"):
        rollback_channel(store, STABLE, reason="bad")
    assert _stable(store, exports) == 0
    assert [h.event.action for h in channel_history(store, "enc")] == ["release"] * 3 + ["rollback"] * 2
    _release(store, exports, 3)  # a new release; a rollback from it skips both releases rolled back from
    rollback_channel(store, STABLE, reason="bad again")
    assert _stable(store, exports) == 0


def _report_failed(uri: str, sha: str, name: str, go, results) -> None:
    """A serving host's ``receipt --failed --plan SHA``, in its own process, started with the others at once."""
    go.wait()
    try:
        done = record_receipt(open_store(uri), STABLE, lambda p, served: new_receipt(
            p, ok=False, error="CUDA error 700", load_ms=None, latency_ms=None, by=name, host=host(name),
            plan_sha256=sha, served=served))
        results.put("rolled back" if done.rolled_back else done.unchanged or done.blocked or "recorded")
    except Exception as err:  # noqa: BLE001 - the parent asserts on what the child says
        results.put(f"error: {err!r}")


def _six_hosts_report_one_plan(exports, uri):
    store = open_store(uri)
    _release(store, exports, 1, "candidate")  # the model's promotion policy: rollback on a failed receipt
    for i in range(3):
        _release(store, exports, i)
    sha = exports.manifest(store, 2).plan.sha256
    ctx = multiprocessing.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    hosts = [ctx.Process(target=_report_failed, args=(uri, sha, f"host-{n}", go, results)) for n in range(6)]
    for h in hosts:
        h.start()
    go.set()
    said = [results.get(timeout=120) for _ in hosts]
    for h in hosts:
        h.join(timeout=60)
    actions = [h.event.action for h in channel_history(store, "enc") if h.channel == "stable"]
    return said, actions, _stable(store, exports)


def test_six_hosts_reporting_one_bad_plan_at_once_make_one_rollback_in_every_run(exports, tmp_path):
    for run in range(20):
        said, actions, now = _six_hosts_report_one_plan(exports, exports.fresh(tmp_path / f"s{run}"))
        assert actions == ["release"] * 3 + ["rollback"] and now == 1, (run, said, actions)
        assert said.count("rolled back") == 1 and all("no longer serves" in s for s in said if s != "rolled back")


def test_six_hosts_on_moto_s3_make_one_rollback(exports, s3_uri):
    src = open_store(exports.root.as_uri())
    dst = open_store(s3_uri)
    for key in src.list(""):
        dst.put_if_absent(key, src.get(key).data)
    said, actions, now = _six_hosts_report_one_plan(exports, s3_uri)
    assert actions == ["release"] * 3 + ["rollback"] and now == 1, (said, actions)


def test_receipts_count_from_a_gpu_that_serves_the_plan_once_per_host(exports, tmp_path):
    store = open_store(exports.fresh(tmp_path / "s"))
    _release(store, exports, 0)
    _release(store, exports, 1, "candidate")

    def receipt(name):
        return record_receipt(store, serving_key(store, NAME, "candidate"), lambda p, served: new_receipt(
            p, ok=True, error=None, load_ms=1.0, latency_ms=None, by="t", host=host(name), served=served))

    refusal = r"h100-a \(NVIDIA H100 80GB HBM3\) cannot serve .* a plan for NVIDIA GeForce RTX 4090"
    with pytest.raises(UserInputError, match=refusal):
        receipt("h100-a")  # TensorRT-RTX plans do not run on an H100: refused, naming both GPUs
    receipt("h1")
    receipt("h1")
    [c] = candidates(store, "enc", {("rtx-4090", NAME.toolchain): "built"})
    assert c.verdict == "waits" and "1 of 2 ok receipts" in {g.name: g.detail for g in c.gates}["canary"]
    receipt("h2")
    [c] = candidates(store, "enc", {("rtx-4090", NAME.toolchain): "built"})
    assert c.verdict == "holds", c.gates
    assert read_pointer(store, CANDIDATE)[0] is not None


def test_a_stored_string_prints_as_one_line_with_its_control_characters_escaped():
    forged = "ok\n2026-01-01 00:00  stable release abc\x1b]0;owned\x07\u2028x"
    line = one_line(forged)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line and "\u2028" not in line
    assert line == "ok\\n2026-01-01 00:00  stable release abc\\x1b]0;owned\\x07\\u2028x"
    assert os.linesep not in one_line("a\r\nb")


def test_promotion_reads_the_policy_registered_now_and_says_it_differs(exports, tmp_path):
    """farm.yaml registered again with `receipts: 0`: the candidate built under `receipts: 2` holds now, and says
    why; a failed stable receipt reads `on_failed_receipt` as registered now too."""
    store = open_store(exports.fresh(tmp_path / "s"))
    _release(store, exports, 0)
    _release(store, exports, 1, "candidate")
    release_on = {("rtx-4090", NAME.toolchain): "built"}
    [c] = candidates(store, "enc", release_on)
    assert c.verdict == "waits" and not c.policy_note
    export = "models/enc/20260301T000000Z-0123456789ab"
    store.put_if_absent(f"{export}/farm.yaml", b"precision: fp32\npromotion: {receipts: 0, on_failed_receipt: block}\n")
    store.put_if_absent(f"{export}/export.json", b"{}")
    [c] = candidates(store, "enc", release_on)
    assert c.verdict == "holds", c.gates
    assert "farm.yaml of export 20260301T000000Z-0123456789ab" in c.policy_note
    assert "receipts 2 -> 0" in c.policy_note and "on_failed_receipt rollback -> block" in c.policy_note
    sha = exports.manifest(store, 0).plan.sha256
    done = record_receipt(store, STABLE, lambda p, served: new_receipt(
        p, ok=False, error="CUDA error 700", load_ms=None, latency_ms=None, by="t", host=host("h1"),
        plan_sha256=sha, served=served))
    assert done.rolled_back is None and "on_failed_receipt: block" in done.blocked


def test_a_second_promotion_of_what_stable_serves_is_refused_not_recorded_twice(exports, tmp_path):
    """The loser of two racing promotions: its gates were judged before the winner moved stable."""
    from trtfarm.publishing.release import ChannelRefused
    from trtfarm.releases.channels import promote_move

    store = open_store(exports.fresh(tmp_path / "s"))
    _release(store, exports, 0)
    _release(store, exports, 1, "candidate")
    candidate = read_pointer(store, CANDIDATE)[0]
    promote_move(store, candidate, {"canary": "holds: test"}, "holds", reason="first")
    with pytest.raises(ChannelRefused, match="already at"):
        promote_move(store, candidate, {"canary": "holds: test"}, "holds", reason="second")
    assert [h.event.action for h in channel_history(store, "enc") if h.channel == "stable"] == ["release", "promote"]
