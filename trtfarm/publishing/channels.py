"""Release channels: which pointer a host of a channel reads, promotion into ``stable``, rollback, and the history.

Each channel is its own signed pointer (``layout.channel_key``) with its own history, version and claim; the moves
themselves are ``release.move_release``'s (compare-and-swap, the rollback and freeze protection of release claims).
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
    short_ref,
)
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.receipts import list_receipts, receipt_key
from trtfarm.publishing.release import ChannelRefused, ReleaseRefused, move_release, who
from trtfarm.publishing.release_check import read_pointer
from trtfarm.store import Store
from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer
from trtfarm.vocabulary.promotion import Promotion, Receipt


def serving_key(store: Store, name: ReleaseName, channel: str) -> str:
    """The pointer a host of ``channel`` reads: the candidate's own, else stable's (candidate follows stable)."""
    if channel == "candidate":
        key = channel_key(*name, "candidate")
        if store.get(key) is not None:
            return key
    return channel_key(*name, "stable") if channel in CHANNEL_ROOTS else channel_key(*name, channel)


def policy_of(store: Store, name: ReleaseName) -> Promotion | None:
    """The model's promotion policy, as its candidate pointer carries it (None: the model declares none)."""
    from trtfarm.errors import CorruptObject
    from trtfarm.vocabulary.pointer import PointerTooNew

    try:
        pointer, _ = read_pointer(store, channel_key(*name, "candidate"))
    except (CorruptObject, PointerTooNew):  # a damaged or newer candidate pointer: no policy read, so none applies
        return None
    return pointer.promotion if pointer else None


def _bad_plans(store: Store, name: ReleaseName, channel: str, plans: set[str]) -> set[str]:
    """Which of ``plans`` (sha256) a serving host reported failed in ``channel``."""
    return {p for p in plans if any(not r.ok for r in list_receipts(store, *name, channel, p))}


def previous_good(store: Store, pointer: ReleasePointer, bad_plan: str | None = None) -> ReleaseEvent | None:
    """The newest earlier move of ``pointer`` to another manifest, still in the store, with no failed receipt."""
    current = pointer.manifest
    name = ReleaseName(pointer.model, pointer.gpu, pointer.toolchain)
    for event in reversed(pointer.history):
        if event.manifest == current or event.action == "refresh":
            continue
        m = read_manifest(store, event.manifest)
        if m is None or m.plan.sha256 == bad_plan or _bad_plans(store, name, pointer.channel, {m.plan.sha256}):
            continue
        return event
    return None


def rollback_channel(store: Store, key: str, *, reason: str, by: str | None = None, signer=None, trust=None,
                     bad_plan: str | None = None) -> ReleasePointer:
    """Move the channel at ``key`` back to its previous good release (``previous_good``); recorded as a rollback."""
    pointer, _ = read_pointer(store, key)
    if pointer is None:
        raise UserInputError(f"nothing is released at {store.url(key)}: there is nothing to roll back")
    event = previous_good(store, pointer, bad_plan)
    if event is None:
        raise ChannelRefused(f"not rolled back: {pointer.identity} ({pointer.channel}) has no earlier good release "
                             f"in its history; release a known good plan with `trtfarm release MANIFEST --rollback "
                             f"--reason ...`")
    m = read_manifest(store, event.manifest)
    return move_release(store, event.manifest, m, release_on="built", reason=reason, by=by or who(), rollback=True,
                        signer=signer, trust=trust, channel=pointer.channel, promotion=pointer.promotion)


def promote_move(store: Store, candidate: ReleasePointer, gates: dict[str, str], *, reason: str,
                 by: str | None = None, force: bool = False, signer=None, trust=None) -> ReleasePointer:
    """Point ``stable`` at the candidate's manifest, recording the gates as they stood (``force``: an override)."""
    m = read_manifest(store, candidate.manifest)
    if m is None:
        raise ReleaseRefused(f"not promoted: the candidate's manifest {candidate.manifest} is not in the store")
    return move_release(store, candidate.manifest, m, release_on="built", reason=reason, by=by or who(), force=force,
                        signer=signer, trust=trust, channel="stable", promote=gates)


@dataclass(frozen=True)
class ReceiptRecord:
    """A written receipt, what it did to ``stable`` (the rolled-back pointer), or why it only blocked."""

    key: str
    receipt: Receipt
    rolled_back: ReleasePointer | None = None
    blocked: str = ""


def record_receipt(store: Store, key: str, receipt_of, *, signer=None, trust=None) -> ReceiptRecord:
    """Write a receipt for the channel pointer at ``key`` (``receipt_of(pointer)`` makes it) and act on a failure.

    ``UserInputError`` when the channel has no pointer; a failed receipt on ``stable`` under the ``rollback`` policy
    (the candidate's pointer carries the model's policy; a model without one only records it) moves ``stable`` back.
    """
    pointer, _ = read_pointer(store, key)
    parsed = parse_channel_key(key)
    if pointer is None or parsed is None:
        raise UserInputError(f"nothing is released at {store.url(key)}: a receipt names a channel's plan; "
                             "`trtfarm status MODEL` shows what each channel serves")
    receipt = receipt_of(pointer)
    where = receipt_key(receipt)
    store.put_if_absent(where, receipt.model_dump_json(indent=2).encode())
    if receipt.ok or pointer.channel != "stable":
        return ReceiptRecord(where, receipt)
    policy = policy_of(store, parsed[0])
    why = f"failed load receipt from {receipt.host.name}: {receipt.error}"
    if policy is None or policy.on_failed_receipt == "block":
        how = "the model declares no promotion: block" if policy is None else "promotion.on_failed_receipt: block"
        return ReceiptRecord(where, receipt, blocked=f"stable kept ({how}); `trtfarm rollback "
                                                     f"{receipt.model} --channel stable` moves it back")
    moved = rollback_channel(store, key, reason=why, by="trtfarm receipt", signer=signer, trust=trust,
                             bad_plan=receipt.plan_sha256)
    return ReceiptRecord(where, receipt, rolled_back=moved)


@dataclass(frozen=True)
class HistoryEntry:
    """One move of one channel's pointer, for ``trtfarm history``."""

    model: str
    gpu: str
    toolchain: str
    channel: str
    event: ReleaseEvent

    def to_json(self) -> dict:
        """The ``--json`` object: ``action``, ``channel``, ``at``, ``build`` and the rest."""
        e = self.event
        return {"action": e.action, "channel": self.channel, "at": e.at, "build": short_ref(e.manifest),
                "model": self.model, "gpu": self.gpu, "toolchain": self.toolchain, "manifest": e.manifest,
                "by": e.by, "reason": e.reason, "gates": e.gates}


def channel_history(store: Store, model: str, problems: list[str] | None = None) -> list[HistoryEntry]:
    """Every recorded move of every channel of ``model``, oldest first."""
    from trtfarm.errors import CorruptObject

    found = []
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
            found += [HistoryEntry(*parsed[0], channel, e) for e in pointer.history]
    return sorted(found, key=lambda h: h.event.at)
