"""The same moves from several processes at once on one store, judged by the reference model (a linearizability
check, as Jepsen's Knossos does for histories): the final ledger and every process's answer must be what the model
gives for some order of the operations, all of which overlap. On the file store and on moto's S3 server."""

from __future__ import annotations

import copy
import itertools
import multiprocessing
import random

import pytest

from trtfarm.errors import MismatchError, UserInputError
from trtfarm.publishing.release import ReleaseRefused, refresh_release
from trtfarm.releases.channels import channel_history, record_receipt, rollback_channel
from trtfarm.releases.moves import move_release
from trtfarm.releases.receipts import new_receipt
from trtfarm.store import open_store

from .ledger_store import POLICY, STABLE, Exports, host
from .reference import Reference

N = 5
OPS = [("release", 3), ("release", 4), ("release", 0), ("rollback",), ("refresh",), ("failed", 2, "h1"),
       ("failed", 2, "h2"), ("failed", 1, "h3"), ("failed", 3, "h1")]


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    return Exports.publish(tmp_path_factory.mktemp("ledger-concurrent"), N)


def _system(uri: str, keys: list[str], op: tuple) -> str:
    """One operation as trtfarm's commands make it; its answer in the model's words."""
    store = open_store(uri)
    try:
        if op[0] == "release":
            from trtfarm.publishing.attest import read_stored

            move_release(store, keys[op[1]], read_stored(store, keys[op[1]]).manifest, release_on="built",
                         reason="concurrent release")
            return "moved"
        if op[0] == "rollback":
            rollback_channel(store, STABLE, reason="by hand")
            return "moved"
        if op[0] == "refresh":
            return "moved" if refresh_release(store, STABLE, None, reason="nightly") else "absent"
        from trtfarm.publishing.publish import read_manifest

        sha = read_manifest(store, keys[op[1]]).plan.sha256
        done = record_receipt(store, STABLE, lambda p, served: new_receipt(
            p, ok=False, error="CUDA error 700", load_ms=None, latency_ms=None, by="t", host=host(op[2]),
            plan_sha256=sha, served=served))
        return "rolled back" if done.rolled_back else "blocked" if done.blocked else "recorded"
    except ReleaseRefused as refused:
        return "older" if "export is older" in str(refused) else f"error: {refused}"
    except MismatchError:
        return "refused"
    except UserInputError:
        return "refused"


def _child(uri, keys, op, go, results, n) -> None:
    go.wait()
    try:
        results.put((n, _system(uri, keys, op)))
    except Exception as err:  # noqa: BLE001 - the parent reports what the child says
        results.put((n, f"error: {err!r}"))


def _model_answer(model: Reference, op: tuple) -> str:
    if op[0] == "release":
        said = model.release("stable", op[1])
        return "moved" if said == "already" else said
    if op[0] == "rollback":
        return model.rollback("stable")
    if op[0] == "refresh":
        return model.refresh("stable")
    return model.receipt("stable", op[1], False, op[2], serves=True)


def _same(op: tuple, model: str, system: str) -> bool:
    """The answers agree; a failed receipt the model orders after a rollback to its plan acts in the rollback's
    process (``moves._failed_meanwhile``), so ``recorded`` there is the model's ``rolled back`` (the ledger decides)."""
    return model == system or op[0] == "failed" and {model, system} == {"rolled back", "recorded"}


def _allowed(start: Reference, ops: list[tuple], said: list[str], final: list[tuple[str, int]]) -> bool:
    """Some order of ``ops`` gives each its answer and the model's ledger ends exactly as ``final``."""
    for order in itertools.permutations(range(len(ops))):
        model = copy.deepcopy(start)
        if all(_same(ops[n], _model_answer(model, ops[n]), said[n]) for n in order) and \
                model.ledger["stable"] == final:
            return True
    return False


def _run(exports: Exports, uri: str, ops: list[tuple]) -> None:
    store = open_store(uri)
    start = Reference(receipts_needed=POLICY.receipts)
    move_release(store, exports.keys[1], exports.manifest(store, 1), release_on="built", reason="b",
                 channel="candidate", promotion=POLICY)  # the policy in force: rollback on a failed receipt
    start.release("candidate", 1)
    for i in range(3):
        move_release(store, exports.keys[i], exports.manifest(store, i), release_on="built", reason="b")
        start.release("stable", i)
    ctx = multiprocessing.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(uri, exports.keys, op, go, results, n)) for n, op in enumerate(ops)]
    for p in procs:
        p.start()
    go.set()
    said = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    answers = [said[n] for n in range(len(ops))]
    assert not [a for a in answers if a.startswith("error")], answers
    final = [(h.event.action, exports.index(h.event.manifest)) for h in channel_history(store, "enc")
             if h.channel == "stable"]
    assert _allowed(start, ops, answers, final), (ops, answers, final)


def test_overlapping_moves_from_several_processes_end_as_the_model_allows(exports, tmp_path):
    rng = random.Random(56)
    for run in range(20):
        _run(exports, exports.fresh(tmp_path / f"s{run}"), rng.sample(OPS, 5))


def test_overlapping_moves_on_moto_s3_end_as_the_model_allows(exports, s3_uri):
    src, dst = open_store(exports.root.as_uri()), open_store(s3_uri)
    for key in src.list(""):
        dst.put_if_absent(key, src.get(key).data)
    _run(exports, s3_uri, [("rollback",), ("failed", 2, "h1"), ("failed", 2, "h2"), ("release", 3), ("refresh",)])
