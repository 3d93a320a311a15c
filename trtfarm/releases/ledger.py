"""A channel's ledger: the pointer's history read as ordered events, and every channel of a model in one order.

The ledger of one (model, GPU, toolchain, channel) is kept in its pointer object (the history), so an event and the
pointer that is its fold are written in one compare-and-swap. Each event carries its sequence number (``seq``: the
version its move gave the pointer); one written as schema 2 (for older serving hosts) has none, and its place is
derived from the pointer's version, counting back. ``history`` merges the channels of a model: each channel in its
own order, and across channels by time, a candidate's event before a stable one of the same instant (a promotion
never lists before the release it promoted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtfarm.layout import short_ref
from trtfarm.releases.rules import Entry
from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer

CHANNEL_RANK = {"candidate": 0, "stable": 1}


def sequenced(pointer: ReleasePointer | None) -> list[tuple[int, ReleaseEvent]]:
    """The pointer's events with their sequence numbers, oldest first (stored, else derived from the version)."""
    if pointer is None:
        return []
    out, nxt = [], pointer.version + 1
    for e in reversed(pointer.history):
        seq = e.seq if e.seq is not None and e.seq < nxt else nxt - 1
        out.append((seq, e))
        nxt = seq
    return out[::-1]


def entries(pointer: ReleasePointer | None) -> list[Entry]:
    """The ledger as the rules read it.

    A pointer edited outside it (its manifest is not its last event's) reads as an override of what it names, so the
    rules decide from what hosts are served.
    """
    found = [Entry(seq, e.action, e.manifest) for seq, e in sequenced(pointer)]
    if pointer is not None and (not found or found[-1].manifest != pointer.manifest):
        found.append(Entry((found[-1].seq if found else pointer.version) + 1, "forced", pointer.manifest))
    return found


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str | None) -> str:
    r"""A stored string printed as one line: every control character (newline, escape, ...) written as ``\xNN``."""
    return _CONTROL.sub(lambda c: {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c.group(), f"\\x{ord(c.group()):02x}")
                        if ord(c.group()) < 0x100 else f"\\u{ord(c.group()):04x}", text or "")


@dataclass(frozen=True)
class HistoryEntry:
    """One event of one channel's ledger, for ``trtfarm history``."""

    model: str
    gpu: str
    toolchain: str
    channel: str
    seq: int
    event: ReleaseEvent

    def to_json(self) -> dict:
        """The ``--json`` object: ``seq``, ``action``, ``channel``, ``at``, ``build`` and the rest."""
        e = self.event
        return {"seq": self.seq, "action": e.action, "channel": self.channel, "at": e.at,
                "build": short_ref(e.manifest), "model": self.model, "gpu": self.gpu, "toolchain": self.toolchain,
                "manifest": e.manifest, "by": e.by, "reason": e.reason, "gates": e.gates, "evidence": e.evidence}


def merged(ledgers: list[list[HistoryEntry]]) -> list[HistoryEntry]:
    """The ledgers of several channels in one order: each in its own, across them by time, candidate first on ties."""
    heads = [0] * len(ledgers)
    out = []
    while True:
        live = [i for i, ledger in enumerate(ledgers) if heads[i] < len(ledger)]
        if not live:
            return out
        pick = min(live, key=lambda i: (_instant(ledgers[i][heads[i]].event.at),
                                        CHANNEL_RANK.get(ledgers[i][heads[i]].channel, 2), i))
        out.append(ledgers[pick][heads[pick]])
        heads[pick] += 1


def _instant(at: str) -> str:
    """``at`` comparable across precisions: whole seconds as ``.000`` (2026-01-01T00:00:00+00:00 sorts as ms)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(.*)", at)
    return f"{m.group(1)}{(m.group(2) or '.000')[:4].ljust(4, '0')}{m.group(3)}" if m else at
