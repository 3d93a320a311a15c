"""The reference model of the release rules: plain Python, a few dozen lines, written apart from trtfarm's own.

Exports are numbered by age (0 is the oldest). Each channel's ledger is a list of ``(action, export)``; the model
answers every request as the rules of docs/serving.md ("The rules") say, and the property tests compare what
trtfarm does and shows with it. Nothing here imports trtfarm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FORWARD = {"release", "promote", "forced"}
CHANNELS = ("stable", "candidate")
RELEASED_UNASKED = {"passed", "not verified"}  # gate verdicts a release moves on without --release (bf16: not verified)


@dataclass
class Reference:
    """The channels of one (model, GPU, toolchain), the receipts that count, the canary policy, each export's gate."""

    receipts_needed: int = 2
    gates: dict[int, str] = field(default_factory=dict)  # export -> its precision gate's verdict (absent: passed)
    ledger: dict[str, list[tuple[str, int]]] = field(default_factory=lambda: {c: [] for c in CHANNELS})
    failed: dict[str, set[int]] = field(default_factory=lambda: {c: set() for c in CHANNELS})
    ok_hosts: dict[tuple[str, int], set[str]] = field(default_factory=dict)

    def current(self, channel: str) -> int | None:
        return self.ledger[channel][-1][1] if self.ledger[channel] else None

    def served(self, channel: str) -> set[int]:
        return {i for _, i in self.ledger[channel]}

    def release(self, channel: str, i: int, rollback: bool = False, force: bool = False,
                override: bool = False) -> str:
        """``moved``, ``already``, ``older`` (refused) or ``held`` (its gate is not passed, and no ``--release``).

        A plan released past its gate (``--release``, or ``--force``) is recorded as ``forced``.
        """
        now = self.current(channel)
        unjudged = self.gates.get(i, "passed") not in RELEASED_UNASKED
        if force:
            self.ledger[channel].append(("forced", i))
        elif now == i:
            return "already"
        elif now is not None and i < now and not rollback:
            return "older"
        elif unjudged and not override:
            return "held"
        elif unjudged:
            self.ledger[channel].append(("forced", i))
        else:
            self.ledger[channel].append(("rollback" if now is not None and i < now else "release", i))
        return "moved"

    def rollback_target(self, channel: str) -> int | None:
        events, now = self.ledger[channel], self.current(channel)
        place, left = {}, set()
        for n, (action, i) in enumerate(events):
            if action in FORWARD:
                place[i] = n
                left.discard(i)
            elif action == "rollback" and n and events[n - 1][1] != i:
                left.add(events[n - 1][1])
        older = [i for i, n in place.items() if n < place.get(now, len(events)) and i != now
                 and i not in left and i not in self.failed[channel]]
        return max(older, key=place.get) if older else None

    def rollback(self, channel: str) -> str:
        """``moved`` or ``refused`` (nothing to go back to)."""
        target = self.rollback_target(channel) if self.ledger[channel] else None
        if target is None:
            return "refused"
        self.ledger[channel].append(("rollback", target))
        return "moved"

    def refresh(self, channel: str) -> str:
        if not self.ledger[channel]:
            return "absent"
        self.ledger[channel].append(("refresh", self.current(channel)))
        return "moved"

    def receipt(self, channel: str, i: int, ok: bool, host: str, serves: bool) -> str:
        """``refused`` (a plan the channel never served, or a GPU that cannot serve it), else what it did."""
        if i not in self.served(channel) or not serves:
            return "refused"
        if ok:
            self.ok_hosts.setdefault((channel, i), set()).add(host)
            return "recorded"
        self.failed[channel].add(i)
        if channel != "stable" or self.current(channel) != i:
            return "recorded"
        if not self.ledger["candidate"]:  # no promotion policy is in force: a failure only blocks
            return "blocked"
        return "rolled back" if self.rollback("stable") == "moved" else "blocked"

    def verdict(self) -> str | None:
        """The candidate's: already, fails, waits or holds (None: there is no candidate)."""
        cand = self.current("candidate")
        if cand is None:
            return None
        if self.current("stable") == cand:
            return "already"
        gate = self.gates.get(cand, "passed")
        if cand in self.failed["candidate"] or cand in self.failed["stable"] or gate == "failed":
            return "fails"
        if gate != "passed":  # the accuracy gate waits for a verdict (not judged; bf16's not verified)
            return "waits"
        return "holds" if len(self.ok_hosts.get(("candidate", cand), ())) >= self.receipts_needed else "waits"

    def promote(self) -> tuple[str | None, int]:
        """The verdict and promote's exit code (0 moved or nothing to move, 1 a gate fails, 3 gates wait)."""
        verdict = self.verdict()
        if verdict == "holds":
            self.ledger["stable"].append(("promote", self.current("candidate")))
        return verdict, {"fails": 1, "waits": 3}.get(verdict or "", 0)
