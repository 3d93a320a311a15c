"""Random sequences of release moves on a real store, each answer held to the reference model (reference.py).

Hypothesis draws releases (plain, ``--rollback``, ``--force``, each with or without a build's ``--release``) to either
channel, rollbacks, refreshes, receipts (ok or failed, from serving hosts with an RTX 4090 or an H100, for any plan)
and promotions, and runs each through the functions the command line and the flows call, on a file store holding
five published exports: two fp32, and fp16 plans whose precision gate was not judged, not verified and failed.
After every step the pointers (what ``pull --channel`` reads), ``history`` and the candidate's verdict (what
``promote --json`` and ``status`` print) must be what the model says. CI runs a bounded number of examples; the
``long`` profile (``--hypothesis-profile long``) runs more, as docs/serving.md records.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trtfarm.errors import MismatchError, UserInputError
from trtfarm.executor import promote, promote_exit
from trtfarm.publishing.release import ReleaseRefused, refresh_release
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases.channels import channel_history, record_receipt, rollback_channel, serving_key
from trtfarm.releases.gates import candidates
from trtfarm.releases.moves import move_release
from trtfarm.releases.receipts import new_receipt
from trtfarm.store import open_store

from .ledger_store import KEYS, NAME, POLICY, Exports, host
from .reference import Reference

N = 5
GATES = {2: "not judged", 3: "not verified", 4: "failed"}  # each fp16 export's gate; 0 and 1 are fp32
EXPORT = st.integers(0, N - 1)
CHANNEL = st.sampled_from(["stable", "candidate"])
HOSTS = st.sampled_from(["h1", "h2", "h3", "h100-a"])
_count = itertools.count()


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    return Exports.publish(tmp_path_factory.mktemp("ledger-model"), N, GATES)


class LedgerMachine(RuleBasedStateMachine):
    """The system (a file store, trtfarm's moves) beside the reference model, step by step."""

    exports: Exports
    scratch: Path

    def __init__(self) -> None:
        super().__init__()
        self.store = open_store(self.exports.fresh(self.scratch / f"run-{next(_count)}"))
        self.model = Reference(receipts_needed=POLICY.receipts, gates=dict(GATES))

    @initialize(candidate=st.booleans())
    def first_builds(self, candidate):
        """Export 0 released to stable; with a ``promotion:`` policy, export 1 to the candidate channel too."""
        self.release("stable", 0, "build")
        if candidate:
            self.release("candidate", 1, "build")

    def _index(self, channel: str) -> int | None:
        pointer, _ = read_pointer(self.store, KEYS[channel])
        return self.exports.index(pointer.manifest if pointer else None)

    @rule(channel=CHANNEL, i=EXPORT, how=st.sampled_from(["build", "rollback", "force"]), override=st.booleans())
    def release(self, channel, i, how, override=False):
        expected = self.model.release(channel, i, rollback=how == "rollback", force=how == "force", override=override)
        try:
            move_release(self.store, self.exports.keys[i], self.exports.manifest(self.store, i), release_on="built",
                         reason=f"test {how}", rollback=how == "rollback", force=how == "force", override=override,
                         channel=channel, promotion=POLICY if channel == "candidate" else None)
            got = "moved" if self._index(channel) == i else "?"
        except ReleaseRefused as refused:  # nothing unjudged is released without an override: it names the verdict
            got = "older" if "export is older" in str(refused) else \
                "held" if f"not released: fp16 gate {GATES.get(i)}" in str(refused) else str(refused)
        assert got == ("moved" if expected == "already" else expected)

    @rule(channel=CHANNEL)
    def rollback(self, channel):
        expected = self.model.rollback(channel)
        try:
            rollback_channel(self.store, KEYS[channel], reason="rolled back by hand")
            got = "moved"
        except (MismatchError, UserInputError):  # no earlier good release; nothing released at all
            got = "refused"
        assert got == expected

    @rule(channel=CHANNEL)
    def refresh(self, channel):
        expected = self.model.refresh(channel)
        got = refresh_release(self.store, KEYS[channel], None, reason="nightly sign")
        assert (got is not None) == (expected == "moved")

    def _plan(self, data, channel: str) -> int:
        """An export for a receipt: mostly one the channel served (the current one most), sometimes any."""
        served = sorted(self.model.served(channel))
        now = self.model.current(channel)
        return data.draw(st.sampled_from([now]) if now is not None and data.draw(st.booleans()) else
                         st.sampled_from(served) if served and data.draw(st.integers(0, 3)) else EXPORT)

    @rule(channel=CHANNEL, data=st.data(), ok=st.booleans(), name=HOSTS)
    def receipt(self, channel, data, ok, name):
        effective = channel if self.model.ledger[channel] else "stable"  # a candidate host follows stable then
        i = self._plan(data, effective)
        expected = self.model.receipt(effective, i, ok, name, serves=not name.startswith("h100"))
        sha = self.exports.manifest(self.store, i).plan.sha256
        try:
            done = record_receipt(self.store, serving_key(self.store, NAME, channel), lambda p, served: new_receipt(
                p, ok=ok, error=None if ok else "CUDA error 700", load_ms=1.0, latency_ms=None, by="test",
                host=host(name), plan_sha256=sha, served=served))
        except UserInputError:
            got = "refused"
        else:
            got = "rolled back" if done.rolled_back else "blocked" if done.blocked else "recorded"
        assert got == expected

    @rule(channel=CHANNEL, data=st.data(), ok=st.booleans(), name=HOSTS)
    def receipt_written_by_another_tool(self, channel, data, ok, name):
        """A receipt object put straight into the store (an older trtfarm, a script): evidence, never a move; it
        counts only from a GPU that serves the plan, once per host."""
        from trtfarm.releases.receipts import receipt_key
        from trtfarm.vocabulary.promotion import Receipt

        effective = channel if self.model.ledger[channel] else "stable"
        i = self._plan(data, effective)
        if i not in self.model.served(effective):
            return
        if not name.startswith("h100"):
            (self.model.ok_hosts.setdefault((effective, i), set()).add(name) if ok
             else self.model.failed[effective].add(i))
        m = self.exports.manifest(self.store, i)
        r = Receipt(model="enc", gpu=NAME.gpu, toolchain=NAME.toolchain, channel=effective,
                    manifest=self.exports.keys[i], plan_sha256=m.plan.sha256, ok=ok, error=None if ok else "boom",
                    load_ms=None, latency_ms=None, at=f"2026-03-01T00:00:{next(_count) % 60:02d}.000+00:00",
                    by="script", host=host(name))
        self.store.put_if_absent(receipt_key(r), r.model_dump_json().encode())

    @rule()
    def promote(self):
        expected, code = self.model.promote()
        found = candidates(self.store, "enc", {("rtx-4090", NAME.toolchain): "built"})
        rows = promote(self.store, found)
        assert [r.candidate.verdict for r in rows] == ([expected] if expected else [])
        assert promote_exit(rows) == code
        assert [r.moved is not None for r in rows] == ([expected == "holds"] if expected else [])

    @invariant()
    def pointers_history_and_verdict_are_the_models(self):
        for channel in KEYS:
            assert self._index(channel) == self.model.current(channel), channel
        events = channel_history(self.store, "enc")
        for channel in KEYS:
            got = [(h.event.action, self.exports.index(h.event.manifest)) for h in events if h.channel == channel]
            assert got == self.model.ledger[channel], channel
            seqs = [h.seq for h in events if h.channel == channel]
            assert seqs == sorted(set(seqs)), seqs  # the ledger's order: sequence numbers only grow
        found = candidates(self.store, "enc", {("rtx-4090", NAME.toolchain): "built"})
        assert [c.verdict for c in found] == ([v] if (v := self.model.verdict()) else [])
        pulled, _ = read_pointer(self.store, serving_key(self.store, NAME, "candidate"))  # pull --channel candidate
        assert self.exports.index(pulled.manifest if pulled else None) == \
            (self.model.current("candidate") if self.model.ledger["candidate"] else self.model.current("stable"))


def test_random_sequences_of_moves_answer_as_the_reference_model(exports, tmp_path):
    LedgerMachine.exports, LedgerMachine.scratch = exports, tmp_path
    run = LedgerMachine.TestCase()
    chosen = settings.default  # the default profile in CI: 40 examples of 30 steps; `long`: its own numbers
    bounded = chosen.max_examples <= 100
    run.settings = settings(max_examples=40 if bounded else chosen.max_examples,
                            stateful_step_count=30 if bounded else chosen.stateful_step_count, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    run.runTest()
