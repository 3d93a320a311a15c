"""Promotion gates: what a candidate needs before ``stable`` moves to it, each as holds / waits / fails (read only).

- ``accuracy``: the precision gate passed (an FP32 plan has none to pass); a release's decision reads the gate's
  verdict too (``vocabulary/plan_gate.py``, as ``rules.Evidence.gate``);
- ``engine``: the engine check passed on the target's GPU (a target that releases on build does not wait for it);
- ``latency``: no slower than stable's by more than ``promotion.latency_budget`` (the engine check's p50, else the
  receipts' first latency);
- ``canary``: at least ``promotion.receipts`` ok load receipts for the candidate's plan, none failed, the first at
  least ``promotion.soak_s`` ago.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from trtfarm.layout import ReleaseName, channel_key, channel_prefix, parse_channel_key, short_ref
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release_check import read_pointer
from trtfarm.releases.policy import PolicyInForce, policy_in_force
from trtfarm.releases.receipts import counting, list_receipts
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.pointer import ReleasePointer
from trtfarm.vocabulary.promotion import Promotion, Receipt

Verdict = Literal["holds", "waits", "fails"]


@dataclass(frozen=True)
class Gate:
    """One gate of one candidate."""

    name: str
    verdict: Verdict
    detail: str
    timed: bool = False  # the verdict may change with time alone (a soak in progress), not only with the store

    def text(self) -> str:
        """``holds: ...`` as ``promote`` prints it and the history records it."""
        return f"{self.verdict}: {self.detail}"


@dataclass(frozen=True)
class Candidate:
    """A candidate pointer, the stable pointer of its identity, and its gates."""

    name: ReleaseName
    pointer: ReleasePointer
    stable: ReleasePointer | None
    gates: list[Gate] = field(default_factory=list)
    policy_note: str = ""  # where the policy in force comes from, when it differs from the candidate's own

    @property
    def verdict(self) -> str:
        """``already`` (stable serves it), ``fails``, ``waits`` or ``holds``."""
        if self.stable is not None and self.stable.manifest == self.pointer.manifest:
            return "already"
        verdicts = {g.verdict for g in self.gates}
        return next((v for v in ("fails", "waits") if v in verdicts), "holds")

    def figures(self) -> dict[str, str]:
        """The gates as the history records them."""
        return {g.name: g.text() for g in self.gates}

    def to_json(self) -> dict:
        """One ``promote --json`` row."""
        return {"model": self.name.model, "gpu": self.name.gpu, "toolchain": self.name.toolchain,
                "candidate": short_ref(self.pointer.manifest),
                "stable": short_ref(self.stable.manifest) if self.stable else None, "verdict": self.verdict,
                "gates": [{"gate": g.name, "verdict": g.verdict, "detail": g.detail} for g in self.gates],
                "policy_note": self.policy_note or None}


def _accuracy(m: Manifest) -> Gate:
    acc = m.precision.accuracy or {}
    if m.precision.recipe == "fp32":
        return Gate("accuracy", "holds", "fp32: no precision conversion to check")
    if acc.get("passed") is True:
        return Gate("accuracy", "holds", f"{m.precision.recipe} passed its gate against the FP32 model")
    if acc.get("passed") is False:
        return Gate("accuracy", "fails", f"{m.precision.recipe} failed its gate against the FP32 model")
    return Gate("accuracy", "waits", f"{m.precision.recipe} has no accuracy verdict; run `trtfarm precision`")


def _engine(m: Manifest, release_on: str) -> Gate:
    status = m.verification.engine.status
    if status == "passed":
        return Gate("engine", "holds", f"engine check passed on {m.target.gpu_name}")
    if status == "failed":
        return Gate("engine", "fails", f"engine check failed on {m.target.gpu_name}")
    if release_on == "built":
        return Gate("engine", "holds", f"engine check {status}; not waited for (release_on: built)")
    return Gate("engine", "waits", f"engine check {status} on {m.target.gpu_name}")


def _p50(m: Manifest | None, receipts: list[Receipt]) -> tuple[float | None, str]:
    if m is not None:  # the engine check's figures as validation/summary.py writes them: profile -> statistics
        latency = (m.verification.engine.figures or {}).get("latency") or {}
        if latency:
            return float(next(iter(latency.values()))["p50"]), "engine check p50"
    figures = [r.latency_ms for r in receipts if r.ok and r.latency_ms is not None]
    return (statistics.median(figures), "receipts' median latency") if figures else (None, "")


def _latency(policy: Promotion, cand: Manifest, cand_receipts: list[Receipt], stable: Manifest | None,
             stable_receipts: list[Receipt]) -> Gate:
    if policy.latency_budget is None:
        return Gate("latency", "holds", "not compared (no latency_budget)")
    new, how = _p50(cand, cand_receipts)
    old, how_old = _p50(stable, stable_receipts)
    if stable is None:
        return Gate("latency", "holds", "no stable release to compare with")
    if new is None or old is None or how != how_old:
        return Gate("latency", "waits", "no latency figures for both builds yet (engine check or receipts with "
                                        "--latency-ms)")
    limit = old * (1 + policy.latency_budget)
    verdict: Verdict = "holds" if new <= limit else "fails"
    return Gate("latency", verdict, f"{how} {new:.3f} ms vs stable {old:.3f} ms (budget +"
                                    f"{policy.latency_budget:.0%}: {limit:.3f} ms)")


def _canary(policy: Promotion, receipts: list[Receipt], now: datetime) -> Gate:
    failed = [r for r in receipts if not r.ok]
    if failed:
        return Gate("canary", "fails", f"{len(failed)} failed receipt(s), first from {failed[0].host.name}: "
                                       f"{failed[0].error}")
    ok = [r for r in receipts if r.ok]
    if len(ok) < policy.receipts:
        return Gate("canary", "waits", f"{len(ok)} of {policy.receipts} ok receipts")
    if policy.receipts == 0:
        return Gate("canary", "holds", "no receipts asked for")
    first = datetime.fromisoformat(ok[0].at)
    soaked = (now - (first if first.tzinfo else first.replace(tzinfo=timezone.utc))).total_seconds()
    if soaked < policy.soak_s:
        return Gate("canary", "waits", f"{len(ok)} ok receipts; soaked {soaked:.0f} of {policy.soak_s:.0f} s",
                    timed=True)
    return Gate("canary", "holds", f"{len(ok)} ok receipts over {soaked:.0f} s, none failed")


def candidate_gates(store: Store, name: ReleaseName, pointer: ReleasePointer, release_on: str = "engine",
                    now: datetime | None = None, in_force: PolicyInForce | None = None) -> Candidate:
    """The gates of the candidate ``pointer`` of ``name``, against its stable pointer.

    ``in_force``: the policy in force (``policy.policy_in_force``); None: the candidate's own.
    """
    stable, _ = read_pointer(store, channel_key(*name, "stable"))
    cand_m = read_manifest(store, pointer.manifest)
    stable_m = read_manifest(store, stable.manifest) if stable else None
    if cand_m is None:
        return Candidate(name, pointer, stable, [Gate("manifest", "fails", f"{pointer.manifest} is not in the store")])
    # a failure of the same plan on stable (it was promoted, then rolled back) counts against it here too; a
    # receipt counts only from a host that can serve the plan, once per host (``receipts.counting``)
    receipts = counting(list_receipts(store, *name, "candidate", pointer.plan_sha256), cand_m)
    receipts += [r for r in counting(list_receipts(store, *name, "stable", pointer.plan_sha256), cand_m) if not r.ok]
    stable_receipts = counting(list_receipts(store, *name, "stable", stable.plan_sha256), stable_m) \
        if stable and stable_m else []
    policy = (in_force.policy if in_force else pointer.promotion) or Promotion()
    note = f"the policy in force ({in_force.source}) differs from the candidate's: {in_force.differs}" \
        if in_force and in_force.differs else ""
    now = now or datetime.now(timezone.utc)
    gates = [_accuracy(cand_m), _engine(cand_m, release_on),
             _latency(policy, cand_m, receipts, stable_m, stable_receipts), _canary(policy, receipts, now)]
    return Candidate(name, pointer, stable, gates, note)


def candidates(store: Store, model: str, release_on: dict[tuple[str, str], str] | None = None,
               now: datetime | None = None) -> list[Candidate]:
    """Every candidate of ``model`` with its gates; ``release_on`` maps (gpu, toolchain) to the target's policy."""
    found = []
    for key in store.list(channel_prefix("candidate", model)):
        parsed = parse_channel_key(key)
        pointer, _ = read_pointer(store, key)
        if parsed is None or pointer is None:
            continue
        name = parsed[0]
        found.append(candidate_gates(store, name, pointer, (release_on or {}).get((name.gpu, name.toolchain),
                                                                                  "engine"), now,
                                     policy_in_force(store, model, pointer.promotion)))
    return found


def candidate_models(store: Store) -> list[str]:
    """Every model with a candidate pointer in the store, sorted."""
    return sorted({parsed[0].model for key in store.list(channel_prefix("candidate"))
                   if (parsed := parse_channel_key(key)) is not None})
