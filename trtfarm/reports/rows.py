"""One row of a run report: a target's outcome and the figures the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReportRow:
    """One target of a run; ``precision``: its plan's recipe (fp32, fp16, int8, ...), empty without a manifest."""

    target: str
    status: str
    reason: str = ""
    engine: str = ""
    accuracy: str = ""
    p50_ms: float | None = None
    p99_ms: float | None = None
    memory_mib: float | None = None
    build_s: float | None = None
    plan_mib: float | None = None
    changes: str = ""
    regressed: bool = False
    manifest: str = ""
    regressions: list[str] = field(default_factory=list)
    tactic_changes: str = ""
    precision: str = ""
