"""The fleet at a glance, as typed results: what a proposed fleet would cost, and where every model x target stands.

``state/whatif.py`` decides ``TargetDecision``s (rebuild, keep, new, drop) without writing anything;
``state/status.py`` finds each ``TargetStatus`` (released, stale, failed, missing, pending). Both stay typed until
the command line (``to_json``) or a page (``reports/fleet_html.py``) shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Action = Literal["rebuild", "keep", "new", "drop"]
State = Literal["released", "stale", "failed", "missing", "pending", "refused", "damaged"]
ACTIONS: tuple[Action, ...] = ("rebuild", "new", "drop", "keep")
STATES: tuple[State, ...] = ("released", "pending", "stale", "failed", "refused", "damaged", "missing")
RunWord = Literal["build", "withdraw+rebuild", "release", "up-to-date", "skipped", "failed", "precision first"]
RUN_BUILDS: tuple[RunWord, ...] = ("build", "withdraw+rebuild")
NOTHING_RELEASED = "no plan released for this target"  # a missing target's reason when no run said more


@dataclass(frozen=True)
class RunDecision:
    """What a run's planner decided for one (model, target), and why (``farm run --dry-run`` says it)."""

    model: str
    target: str
    run: RunWord
    reason: str = ""
    build_digest: str | None = None


@dataclass(frozen=True)
class TargetDecision:
    """What a run under a proposed fleet would do for one (model, target), why, and what it would cost.

    ``reasons`` name the parts of the build digest that change (``toolchain: ...``, ``GPU: ...``, ``builder setting:
    ...``, ``precision recipe: ...``, ``export: ...``, ``profiles: ...``). ``estimate_s`` is the build's expected wall
    time (None: nothing to base it on); a target that shares its build with another costs nothing of its own.
    """

    model: str
    target: str
    action: Action
    reasons: tuple[str, ...] = ()
    estimate_s: float | None = None
    basis: str = ""
    basis_kind: str = ""  # this GPU, same compute capability, other GPU, model size, no basis, shared, ...
    pool: str | None = None  # the work pool the build runs on (the proposed fleet's; the current one's for drop)
    build_digest: str | None = None  # the proposed build (None: dropped, or not computable before the precision step)
    published: bool = False  # whether that build is in the store now
    channel: str = "stable"  # the pointer its release moves: candidate when the model's farm.yaml declares promotion:
    run: str = ""  # farm run --dry-run: what the run's planner decides (a RunWord); "": a what-if

    def to_json(self) -> dict:
        """``{model, target, action, reasons, estimate_s, basis, channel}`` (``trtfarm whatif --json``, one per pair).

        A dry run's decision adds ``run``: the planner's own word for it (build, withdraw+rebuild, release, ...).
        """
        return {"model": self.model, "target": self.target, "action": self.action, "reasons": list(self.reasons),
                "estimate_s": self.estimate_s, "basis": self.basis, "channel": self.channel,
                **({"run": self.run} if self.run else {})}


@dataclass(frozen=True)
class FleetDecisions:
    """Every decision of a what-if, with the serving side it touches."""

    decisions: list[TargetDecision]
    serving: list[str] = field(default_factory=list)  # serving images declared differently, or left behind
    triton: dict[str, list[str]] = field(default_factory=dict)  # model -> targets whose plan its repository changes
    refused: list[str] = field(default_factory=list)  # models a run would refuse under the proposed fleet, and why

    def changed(self) -> list[TargetDecision]:
        """The decisions that build or drop something (everything but keep)."""
        return [d for d in self.decisions if d.action != "keep"]

    def pool_seconds(self) -> dict[str, float]:
        """Estimated build seconds per work pool (GPU time the builds hold), largest first."""
        per: dict[str, float] = {}
        for d in self.decisions:
            if d.action in ("rebuild", "new") and d.pool and d.basis_kind != "shared":
                per[d.pool] = per.get(d.pool, 0.0) + (d.estimate_s or 0.0)
        return dict(sorted(per.items(), key=lambda kv: (-kv[1], kv[0])))

    def unestimated(self) -> int:
        """Builds with no estimate at all (no build of their toolchain family recorded to base one on)."""
        return sum(d.action in ("rebuild", "new") and d.estimate_s is None for d in self.decisions)

    def counts(self) -> dict[str, int]:
        """How many (model, target) pairs take each action."""
        return {a: sum(d.action == a for d in self.decisions) for a in ACTIONS}

    def kept(self) -> dict[str, tuple[int, int, int]]:
        """Target -> (models whose published plan it keeps, models it leaves unbuilt as it is, models it covers)."""
        out: dict[str, tuple[int, int, int]] = {}
        for d in self.decisions:
            keep, unbuilt, total = out.get(d.target, (0, 0, 0))
            out[d.target] = (keep + (d.action == "keep" and d.published),
                             unbuilt + (d.action == "keep" and not d.published), total + 1)
        return out

    def bases(self) -> dict[str, int]:
        """How many builds each kind of estimate basis covers."""
        out: dict[str, int] = {}
        for d in self.decisions:
            if d.action in ("rebuild", "new"):
                out[d.basis_kind] = out.get(d.basis_kind, 0) + 1
        return out


@dataclass(frozen=True)
class TargetStatus:
    """Where one (model, target) stands: its state, why, and the released plan's facts; the one cell type.

    Computed from the store's objects (``state/status.py``), kept as it is in a state record (``state/record.py``
    ``KeptCell``, less ``age_s``: a view counts the age by its own clock) and read back from one; its candidate
    channel's columns are kept with it, so a view of a promoted model reads nothing else.

    ``released_at``/``age_s``: when the released build was released (a refresh by ``trtfarm sign`` is no release) or
    since when a build has failed (``since``). ``engine``: the engine check's status on the target GPU (passed,
    pending, failed, not_run); ``signed``: what was verified of the release (``signed`` by a trusted key;
    ``unverified``: a signature is there, but no trusted keys are configured here; ``unsigned``; ``refused``: serving
    hosts refuse it).
    """

    model: str
    target: str
    state: State
    reason: str = ""
    released_at: str | None = None
    age_s: float | None = None
    precision: str | None = None
    engine: str | None = None
    signed: str | None = None
    since: str | None = None
    manifest: str | None = None  # the store key of the released (or pending, or failed) manifest
    export: str | None = None  # the export the state is judged against (its id, or its onnx digest's 12)
    # the candidate channel (a model with promotion:): its build (MODEL/GPU/BUILD), the gates' verdict
    # (holds, waits, fails, already) and what it waits for or why it fails
    candidate: str | None = None
    candidate_verdict: str | None = None
    candidate_detail: str = ""

    def aged(self, age_s: float | None) -> TargetStatus:
        """This cell with ``age_s`` (a view counts a kept cell's age by its own clock), copied field for field.

        What ``dataclasses.replace`` does, without its per-field introspection: a view of 20,000 cells spent a
        sixth of its time there.
        """
        cell = object.__new__(TargetStatus)
        cell.__dict__.update(self.__dict__, age_s=age_s)
        return cell

    def to_json(self) -> dict:
        """``{model, target, state, reason, released_at, ...}`` (``trtfarm status --json``, one per pair)."""
        return {"model": self.model, "target": self.target, "state": self.state, "reason": self.reason,
                "released_at": self.released_at, "age_s": self.age_s, "precision": self.precision,
                "engine": self.engine, "signed": self.signed, "since": self.since, "manifest": self.manifest,
                "export": self.export,
                "candidate": {"build": self.candidate, "verdict": self.candidate_verdict,
                              "detail": self.candidate_detail} if self.candidate else None}


@dataclass(frozen=True)
class ReleaseRef:
    """What one channel pointer (``releases/...`` or ``candidates/...``) references, as the state model finds it.

    ``identity``: the ``model/gpu/toolchain`` its key asks for (the key itself when it is not a pointer's key);
    ``manifest``: the manifest it names (None: the pointer cannot be read); ``refusal``: why a serving host without
    trusted keys refuses it (a damaged pointer, a pointer or manifest of another identity, a manifest missing or
    damaged), in ``pull``'s words; None when such a host takes it. Keys are not judged here: what a pointer references
    does not change with who signed it.
    """

    pointer: str
    identity: str
    channel: str
    manifest: str | None
    refusal: str | None = None


@dataclass(frozen=True)
class FleetStatus:
    """The matrix: models x targets, one ``TargetStatus`` per pair a model builds for."""

    models: list[str]
    targets: list[str]
    cells: list[TargetStatus]
    generated_at: str
    store: str = ""
    problems: list[str] = field(default_factory=list)  # damaged objects skipped, said once each
    notes: list[str] = field(default_factory=list)  # how the answer was found (records read, state recomputed)
    _by_pair: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._by_pair.update({(c.model, c.target): c for c in self.cells})

    def cell(self, model: str, target: str) -> TargetStatus | None:
        """The pair's status (None: the model's build spec leaves that target out)."""
        return self._by_pair.get((model, target))

    def counts(self) -> dict[str, int]:
        """How many pairs are in each state."""
        return {s: sum(c.state == s for c in self.cells) for s in STATES}


def duration_text(seconds: float | None) -> str:
    """``40 s``, ``3.2 min``, ``1.5 h``: an estimate that fits a table cell (``?``: none)."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def age_text(seconds: float | None) -> str:
    """``45s``, ``12m``, ``5h``, ``3d``: an age that fits a matrix cell."""
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(int(seconds), 0)}s"
