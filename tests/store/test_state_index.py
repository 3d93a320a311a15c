"""The state records' index (``state/record_index.py``) on S3 (moto's server over HTTP): it saves reads, and no state
of the store or the index changes what a view reads.

The referee is the records themselves: whatever was written, rewritten behind trtfarm's back, damaged or deleted,
in the records or in the index, a survey's ``recorded()`` equals each listed record read and parsed on its own
(its problems included). A state machine drives random sequences of those moves; a second test writes from
several processes at once into the same shards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.store_requests import CountingStore
from trtfarm import layout
from trtfarm.errors import CorruptObject
from trtfarm.layout_shared import state_index_key, state_index_prefix
from trtfarm.state import record_index
from trtfarm.state.record import RecordedState, recorded_state_from_json, write_state
from trtfarm.state.record_index import index_records, shard_of
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import open_store

REPO = Path(__file__).resolve().parents[2]
MODELS = [f"m{i:02d}" for i in range(12)]


def _state(model: str, by: str = "test") -> RecordedState:
    return RecordedState(model=model, inputs="0" * 64, written_at="2026-12-04T00:00:00+00:00", by=by,
                         expected={}, cells={})


def _reference(store) -> tuple[dict[str, RecordedState], set[str]]:
    """Each listed record read and parsed on its own: the answer, and the models whose record is damaged."""
    answer, damaged = {}, set()
    for key in store.list(layout.state_prefix()):
        model = layout.parse_state_key(key)
        blob = store.get(key)
        if model is None or blob is None:
            continue
        try:
            state = recorded_state_from_json(blob.data, store.url(key))
        except CorruptObject:
            damaged.add(model)
            continue
        if state is not None:
            answer[model] = state
    return answer, damaged


def _surveyed(store) -> tuple[dict[str, RecordedState], set[str], Counter]:
    """What a cold survey reads of every record, the models it calls damaged, and its GETs by kind of key."""
    calls = Counter()
    survey = StoreSurvey(CountingStore(store, calls), None)
    found = survey.recorded(survey.states)
    damaged = {layout.parse_state_key(k) for k in survey.damaged}
    gets = Counter("index" if k.startswith(state_index_prefix()) else "record" for (m, k), n in calls.items()
                   for _ in range(n) if m == "get")
    return found, damaged, gets


@pytest.fixture
def few_shards(monkeypatch):
    """Four shards, so that a dozen models make an index worth reading (every writer and reader in this process)."""
    monkeypatch.setattr(record_index, "SHARDS", 4)


def test_a_cold_view_reads_the_shards_not_each_record(s3_uri, few_shards):
    store = open_store(s3_uri)
    for half in (MODELS[:6], MODELS[6:]):  # two runs, each its models' shards: the second keeps the first's entries
        written = {m: write_state(store, _state(m)) for m in half}
        assert index_records(store, written) == len({shard_of(m) for m in half})
    found, damaged, gets = _surveyed(store)
    assert found == _reference(store)[0] and len(found) == len(MODELS) and not damaged
    assert gets == {"index": 4}  # 4 shards read, no record

    store.compare_and_swap(layout.state_key("m03"), store.get(layout.state_key("m03")).data.replace(b'"test"',
                                                                                                   b'"other"'),
                           store.get(layout.state_key("m03")).etag)  # rewritten behind the index's back
    found, _, gets = _surveyed(store)
    assert found["m03"].by == "other" and found == _reference(store)[0]
    assert gets == {"index": 4, "record": 1}


def test_the_file_store_keeps_no_index(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    assert index_records(store, {m: write_state(store, _state(m)) for m in MODELS}) == 0
    assert not list(store.list(state_index_prefix()))


class IndexMachine(RuleBasedStateMachine):
    """Random moves on the records and the index; after each, a cold survey reads what the records say."""

    uri: str

    @initialize()
    def fresh(self):  # a store whose every model was recorded by a run: the index worth reading from the start
        self.store = open_store(f"{self.uri}-{next(_BUCKETS)}")
        self.record(MODELS, "a")

    @rule(models=st.sets(st.sampled_from(MODELS), min_size=1), by=st.sampled_from(["a", "b"]))
    def record(self, models, by):  # the one writer: records, then each shard once
        index_records(self.store, {m: write_state(self.store, _state(m, by)) for m in sorted(models)})

    @rule(model=st.sampled_from(MODELS), by=st.sampled_from(["a", "c"]))
    def rewrite_record_behind(self, model, by):  # a record written by another tool: the index not told
        data = json.dumps(_state(model, by).model_dump(mode="json"), indent=1).encode()
        blob = self.store.get(layout.state_key(model))
        self.store.compare_and_swap(layout.state_key(model), data, blob.etag if blob else None)

    @rule(model=st.sampled_from(MODELS), garbage=st.sampled_from([b"", b"{", b'{"format": 2}', b"[]"]))
    def damage_record(self, model, garbage):
        blob = self.store.get(layout.state_key(model))
        self.store.compare_and_swap(layout.state_key(model), garbage, blob.etag if blob else None)

    @rule(model=st.sampled_from(MODELS))
    def delete_record(self, model):
        self.store.delete(layout.state_key(model))

    @rule(model=st.sampled_from(MODELS), by=st.sampled_from(["a", "forged"]))
    def forge_entry(self, model, by):  # the index lies about a record
        key = state_index_key(shard_of(model))
        blob = self.store.get(key)
        doc = {"format": 1, "records": record_index._records(blob.data) if blob else {}}
        doc["records"][model] = json.dumps(_state(model, by).model_dump(mode="json"), separators=(",", ":"))
        self.store.compare_and_swap(key, json.dumps(doc).encode(), blob.etag if blob else None)

    @rule(shard=st.integers(0, 3), garbage=st.sampled_from([b"", b"[", b'{"format": 1, "records": []}', None]))
    def damage_shard(self, shard, garbage):
        key = state_index_key(shard)
        if garbage is None:
            self.store.delete(key)
            return
        blob = self.store.get(key)
        self.store.compare_and_swap(key, garbage, blob.etag if blob else None)

    @invariant()
    def a_view_reads_what_the_records_say(self):
        found, damaged, gets = _surveyed(self.store)
        answer, broken = _reference(self.store)
        assert found == answer
        assert damaged == broken
        assert gets["record"] <= len(answer) + len(broken)


_BUCKETS = iter(range(10**6))


def test_no_move_on_the_records_or_the_index_changes_what_a_view_reads(s3_uri, few_shards, request):
    IndexMachine.uri = s3_uri
    chosen = settings()
    run = IndexMachine.TestCase
    run.settings = settings(max_examples=15 if chosen.max_examples <= 100 else chosen.max_examples,
                            stateful_step_count=8 if chosen.max_examples <= 100 else 30, deadline=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()


_WRITER = """
import sys
from trtfarm.state import record_index
from trtfarm.state.record import RecordedState, write_state
from trtfarm.store import open_store
record_index.SHARDS = 2
store = open_store(sys.argv[1])
for round in range(3):
    written = {}
    for model in sys.argv[2:]:
        state = RecordedState(model=model, inputs="0" * 64, written_at="2026-12-04T00:00:00+00:00",
                              by=f"{model}-{round}", expected={}, cells={})
        written[model] = write_state(store, state)
    print(record_index.index_records(store, written))
"""


def test_writers_in_several_processes_share_the_shards(s3_uri, few_shards, monkeypatch):
    monkeypatch.setattr(record_index, "SHARDS", 2)
    store = open_store(s3_uri)
    groups = [MODELS[i::4] for i in range(4)]  # 4 processes, 3 models each, all in 2 shards
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, s3_uri, *g], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for g in groups]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    found, damaged, gets = _surveyed(store)
    assert found == _reference(store)[0] and not damaged
    assert {s.by for s in found.values()} == {f"{m}-2" for m in MODELS}  # every writer's last record
    # each shard was kept by compare-and-swap: the writers that lost a race tried again, so entries are whole
    shards = [json.loads(store.get(state_index_key(s)).data)["records"] for s in range(2)]
    assert set().union(*shards) <= set(MODELS)
    assert gets["index"] == 2 and gets["record"] == len(MODELS) - sum(
        1 for s in shards for m, t in s.items() if json.loads(t)["by"] == f"{m}-2")
