"""The release state machine: one pure function decides every move, ``decide(ledger, request, evidence)``.

The ledger is a channel's ordered events (``Entry``: sequence number, action, manifest); its fold is the manifest the
channel serves now (the last event's). Requests are typed (``ReleaseTo``, ``PromoteTo``, ``Rollback``,
``FailedReceipt``, ``Refresh``); the evidence is what the store says besides the ledger (which manifests serving hosts
reported failed, which are still in the store). The answer is a ``Move`` (the event to append) or a ``Stay`` (nothing
moves, and why: a refusal, or a receipt recorded for a plan the channel no longer serves). Nothing here reads a store
or a clock: the moves (``releases.moves``) read, ask this function, and write the event in one compare-and-swap, and
the property tests compare its answers with a small reference model of the rules (docs/serving.md, "The rules").

The rules:

- **rollback**: to the newest release older than the current one (by the place of each manifest's latest forward
  move in the ledger: a release, promotion or override) that was neither rolled back from since that move nor
  reported failed, and is still in the store; with none, a refusal and the channel stays;
- **failed receipt**: acts only while the channel still serves the plan it names (N hosts reporting one plan make
  one rollback); on ``stable`` under ``on_failed_receipt: rollback`` it is a rollback, under ``block`` (or no
  policy) it only blocks; on ``candidate`` it fails the canary gate and moves nothing;
- **release**: refused when its export is older than the current one's (``--rollback`` or ``--force`` go back on
  purpose); a manifest already served stays; held (a Stay, nothing moves) when its precision gate's verdict is
  not ``passed`` or ``not verified`` (BF16, whose numerics cannot run on the CPU, is released as documented): a
  ``not judged`` or ``failed`` plan moves a pointer only on an override (``--release``, ``--force``), recorded as
  ``forced``;
- **promote**: only when every gate holds (``--force`` overrides); a manifest stable already serves is refused (the
  loser of two racing promotions is told);
- **refresh**: re-signs what the channel serves; never a release, never a rollback target of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

FORWARD = ("release", "promote", "forced")  # moves that put a manifest in its place in the order of releases
RELEASABLE = ("passed", "not verified")  # the precision gate's verdicts a release moves on without an override
Action = Literal["release", "rollback", "forced", "refresh", "promote"]


@dataclass(frozen=True)
class Entry:
    """One event of a channel's ledger, as the rules read it."""

    seq: int
    action: Action
    manifest: str


@dataclass(frozen=True)
class Evidence:
    """What the store says besides the ledger.

    Manifests reported failed in this channel, those still present, and the precision gate's verdict of the plan a
    release names (passed, failed, not judged, not verified).
    """

    failed: frozenset[str] = frozenset()
    present: frozenset[str] | None = None  # None: every manifest of the ledger is in the store
    gate: str = "passed"


@dataclass(frozen=True)
class ReleaseTo:
    """A new plan for the channel (a build's release); ``older``: its export is older than the current one's."""

    manifest: str
    older: bool = False
    force: bool = False  # an operator override: recorded as ``forced``
    rollback: bool = False  # an operator's ``release --rollback``: back to an older export on purpose
    override: bool = False  # ``build --release``: a plan whose gate is not passed is released anyway, as ``forced``


@dataclass(frozen=True)
class PromoteTo:
    """Stable to the candidate's manifest; ``verdict``: the gates' (holds, waits, fails)."""

    manifest: str
    verdict: str
    force: bool = False


@dataclass(frozen=True)
class Rollback:
    """Back to the previous good release (an operator's ``trtfarm rollback``)."""


@dataclass(frozen=True)
class FailedReceipt:
    """A serving host could not load ``manifest``'s plan from this channel; ``policy``: on_failed_receipt."""

    manifest: str
    channel: str = "stable"
    policy: str | None = "rollback"  # rollback, block, or None (the model declares no promotion)


@dataclass(frozen=True)
class Refresh:
    """Re-sign what the channel serves (a new version and expiry of the same manifest)."""


Request = ReleaseTo | PromoteTo | Rollback | FailedReceipt | Refresh


@dataclass(frozen=True)
class Move:
    """The event to append: its action and manifest, and the manifest it leaves (None: the channel was empty)."""

    action: Action
    manifest: str
    left: str | None


@dataclass(frozen=True)
class Stay:
    """Nothing moves, and why.

    ``kind``: ``already``, ``older``, ``held`` (the precision gate), ``fails``, ``waits``, ``no-target``, ``stale``,
    ``blocked``, ``candidate`` or ``empty``; ``refused``: the request was refused, not merely without effect;
    ``served``: what the channel serves.
    """

    kind: str
    refused: bool
    detail: str = ""
    served: str | None = field(default=None)


Decision = Move | Stay


def current(ledger: Sequence[Entry]) -> str | None:
    """The manifest the channel serves: the fold of its ledger (the last event's manifest)."""
    return ledger[-1].manifest if ledger else None


def order_of(ledger: Sequence[Entry]) -> dict[str, int]:
    """Each manifest's place in the order of releases: the sequence number of its latest forward move."""
    return {e.manifest: e.seq for e in ledger if e.action in FORWARD}


def rolled_back_from(ledger: Sequence[Entry]) -> frozenset[str]:
    """Manifests a rollback left since their latest forward move (a new release or override clears it)."""
    left: set[str] = set()
    before = None
    for e in ledger:
        if e.action in FORWARD:
            left.discard(e.manifest)
        elif e.action == "rollback" and before is not None and before != e.manifest:
            left.add(before)
        before = e.manifest
    return frozenset(left)


def rollback_target(ledger: Sequence[Entry], evidence: Evidence) -> str | None:
    """The newest release older than the current one, not rolled back from, not reported failed, still present."""
    now = current(ledger)
    if now is None:
        return None
    order = order_of(ledger)
    place = order.get(now, ledger[-1].seq + 1)
    skip = rolled_back_from(ledger) | evidence.failed | {now}
    older = [(seq, m) for m, seq in order.items() if seq < place and m not in skip
             and (evidence.present is None or m in evidence.present)]
    return max(older)[1] if older else None


def _rollback(ledger: Sequence[Entry], evidence: Evidence) -> Decision:
    now = current(ledger)
    if now is None:
        return Stay("empty", True, "nothing is released: there is nothing to roll back")
    target = rollback_target(ledger, evidence)
    if target is None:
        return Stay("no-target", True, "no earlier good release in its ledger (every older one was rolled back "
                                       "from, reported failed or is gone)", now)
    return Move("rollback", target, now)


def _release(ledger: Sequence[Entry], r: ReleaseTo, evidence: Evidence) -> Decision:
    now = current(ledger)
    if now == r.manifest and not r.force:
        return Stay("already", False, "the channel serves it already", now)
    if r.force:
        return Move("forced", r.manifest, now)
    if r.older and not r.rollback:
        return Stay("older", True, "its export is older than the one the channel serves", now)
    if evidence.gate not in RELEASABLE:
        if not r.override:
            return Stay("held", True, f"its precision gate is {evidence.gate}", now)
        return Move("forced", r.manifest, now)
    return Move("rollback" if r.older and r.rollback else "release", r.manifest, now)


def _promote(ledger: Sequence[Entry], p: PromoteTo) -> Decision:
    now = current(ledger)
    if now == p.manifest:
        return Stay("already", True, "stable serves it already", now)
    if p.force:
        return Move("promote", p.manifest, now)
    if p.verdict in ("fails", "waits"):
        return Stay(p.verdict, True, f"a gate {p.verdict}", now)
    return Move("promote", p.manifest, now)


def _receipt(ledger: Sequence[Entry], f: FailedReceipt, evidence: Evidence) -> Decision:
    now = current(ledger)
    if now != f.manifest:
        return Stay("stale", False, "the channel no longer serves that plan: the receipt is recorded, nothing "
                                    "moves", now)
    if f.channel != "stable":
        return Stay("candidate", False, "a failed receipt fails the candidate's canary gate; it moves nothing", now)
    if f.policy != "rollback":
        return Stay("blocked", False, "the policy blocks (no automatic rollback)", now)
    return _rollback(ledger, Evidence(evidence.failed | {f.manifest}, evidence.present))


def decide(ledger: Sequence[Entry], request: Request, evidence: Evidence = Evidence()) -> Decision:
    """The one decision of every move: the event to append to ``ledger`` for ``request``, or why nothing moves."""
    if isinstance(request, Rollback):
        return _rollback(ledger, evidence)
    if isinstance(request, FailedReceipt):
        return _receipt(ledger, request, evidence)
    if isinstance(request, ReleaseTo):
        return _release(ledger, request, evidence)
    if isinstance(request, PromoteTo):
        return _promote(ledger, request)
    now = current(ledger)
    if now is None:
        return Stay("empty", True, "nothing is released: there is nothing to refresh")
    return Move("refresh", now, now)
