"""Release channels: which pointer a host of a channel reads, promotion into ``stable``, rollback, and the history.

Each channel is its own signed pointer (``layout.channel_key``) whose history is the channel's ledger; every move is
decided by ``rules.decide`` and written by ``moves.apply`` (one compare-and-swap, the rollback and freeze protection
of release claims). A receipt is evidence: written create-only, then a request to the state machine.
A model without ``promotion:`` has no candidate pointer: its candidate channel follows stable.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtfarm.errors import UserInputError
from trtfarm.layout import (
    CHANNEL_ROOTS,
    ReleaseName,
    channel_key,
    channel_prefix,
    parse_channel_key,
)
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import who
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases import moves, rules
from trtfarm.releases.ledger import HistoryEntry, entries, merged, one_line, sequenced
from trtfarm.releases.policy import policy_in_force
from trtfarm.releases.receipts import check_host, receipt_key
from trtfarm.store import Store
from trtfarm.vocabulary.pointer import ReleasePointer
from trtfarm.vocabulary.promotion import Promotion, Receipt


def serving_key(store: Store, name: ReleaseName, channel: str) -> str:
    """The pointer a host of ``channel`` reads: the candidate's own, else stable's (candidate follows stable)."""
    if channel == "candidate":
        key = channel_key(*name, "candidate")
        if store.get(key) is not None:
            return key
    return channel_key(*name, "stable") if channel in CHANNEL_ROOTS else channel_key(*name, channel)


def policy_of(store: Store, name: ReleaseName) -> Promotion | None:
    """The model's promotion policy in force (``policy.policy_in_force``; None: the model declares none)."""
    from trtfarm.errors import CorruptObject
    from trtfarm.vocabulary.pointer import PointerTooNew

    try:
        pointer, _ = read_pointer(store, channel_key(*name, "candidate"))
    except (CorruptObject, PointerTooNew):  # a damaged or newer candidate pointer: no policy read, so none applies
        return None
    return policy_in_force(store, name.model, pointer.promotion).policy if pointer else None


def rollback_channel(store: Store, key: str, *, reason: str, by: str | None = None, signer=None,
                     trust=None) -> ReleasePointer:
    """Move the channel at ``key`` back by the rules (``rules.rollback_target``); recorded as a rollback."""
    return moves.rollback(store, key, reason=reason, by=by or who(), signer=signer, trust=trust).after


def promote_move(store: Store, candidate: ReleasePointer, gates: dict[str, str], verdict: str = "holds", *,
                 reason: str, by: str | None = None, force: bool = False, signer=None,
                 trust=None) -> ReleasePointer:
    """Point ``stable`` at the candidate's manifest, recording the gates as they stood (``force``: an override)."""
    seq = entries(candidate)[-1].seq if candidate.history else None
    return moves.promote_manifest(store, candidate, gates, verdict, reason=reason, by=by or who(), force=force,
                                  signer=signer, trust=trust, candidate_seq=seq).after


@dataclass(frozen=True)
class ReceiptRecord:
    """A written receipt, what it did to ``stable`` (the rolled-back pointer), or why it only blocked or did nothing."""

    key: str
    receipt: Receipt
    rolled_back: ReleasePointer | None = None
    blocked: str = ""
    unchanged: str = ""  # a failed receipt for a plan the channel no longer serves: recorded, nothing moved


def record_receipt(store: Store, key: str, receipt_of, *, signer=None, trust=None) -> ReceiptRecord:
    """Write a receipt for the channel pointer at ``key`` (``receipt_of(pointer, ledger)`` makes it) and act on it.

    ``UserInputError`` when the channel has no pointer, the plan was never in its ledger, or the host's GPU cannot
    serve it. A failed receipt is then a request to the state machine (``rules.FailedReceipt``): it rolls ``stable``
    back only while the channel still serves the plan it names, under the policy in force; else it is recorded.
    """
    pointer, _ = read_pointer(store, key)
    parsed = parse_channel_key(key)
    if pointer is None or parsed is None:
        raise UserInputError(f"nothing is released at {store.url(key)}: a receipt names a channel's plan; "
                             "`trtfarm status MODEL` shows what each channel serves")
    receipt = receipt_of(pointer, served_plans(store, pointer))
    m = read_manifest(store, receipt.manifest)
    if m is None:
        raise UserInputError(f"not recorded: the manifest {receipt.manifest} of the plan is not in the store")
    check_host(receipt, m)
    where = receipt_key(receipt)
    store.put_if_absent(where, receipt.model_dump_json(indent=2).encode())
    if receipt.ok:
        return ReceiptRecord(where, receipt)
    policy = policy_of(store, parsed[0])
    why = f"failed load receipt from {receipt.host.name}: {one_line(receipt.error)}"
    asked = rules.FailedReceipt(receipt.manifest, pointer.channel, policy.on_failed_receipt if policy else None)
    done = moves.apply(store, key, asked, reason=why, by="trtfarm receipt", signer=signer, trust=trust,
                       evidence=[where])
    if done.moved:
        return ReceiptRecord(where, receipt, rolled_back=done.after)
    d = done.decision
    if d.kind == "blocked":
        how = "the model declares no promotion: block" if policy is None else "promotion.on_failed_receipt: block"
        return ReceiptRecord(where, receipt, blocked=f"stable kept ({how}); `trtfarm rollback {receipt.model} "
                                                     "--channel stable` moves it back")
    if d.kind == "no-target":
        return ReceiptRecord(where, receipt, blocked=f"stable kept: it has {d.detail}; release a known good plan "
                                                     "with `trtfarm release MANIFEST --rollback --reason ...`")
    return ReceiptRecord(where, receipt, unchanged=d.detail if d.kind == "stale" else "")


def served_plans(store: Store, pointer: ReleasePointer) -> dict[str, str]:
    """Plan sha256 -> manifest key of every release in the channel's ledger, the current one last (it wins)."""
    found = {}
    for manifest in dict.fromkeys(e.manifest for e in pointer.history):
        m = read_manifest(store, manifest)
        if m is not None:
            found[m.plan.sha256] = manifest
    found[pointer.plan_sha256] = pointer.manifest
    return found


def channel_history(store: Store, model: str, problems: list[str] | None = None) -> list[HistoryEntry]:
    """Every event of every channel ledger of ``model``: each ledger in sequence order, merged by ``ledger.merged``."""
    from trtfarm.errors import CorruptObject

    ledgers = []
    for channel in CHANNEL_ROOTS:
        for key in store.list(channel_prefix(channel, model)):
            parsed = parse_channel_key(key)
            try:
                pointer, _ = read_pointer(store, key)
            except CorruptObject as damaged:
                if problems is not None:
                    problems.append(str(damaged))
                continue
            if pointer is None or parsed is None:
                continue
            ledgers.append([HistoryEntry(*parsed[0], channel, seq, e) for seq, e in sequenced(pointer)])
    return merged(ledgers)
