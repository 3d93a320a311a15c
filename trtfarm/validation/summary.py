"""Turn a GPU validation into the manifest's ``engine`` check: figures, regressions, tactic changes (CPU only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from trtfarm.validation.latency import regression_check
from trtfarm.validation.tactics import diff_tactics, tactics_digest
from trtfarm.vocabulary.manifest import Check, Manifest


class ProfileRegression(BaseModel):
    """One profile's latency against the previous release as the manifest records it (``latency.Regression``'s text)."""

    profile: str
    text: str
    regressed: bool


class TacticChanges(BaseModel):
    """Per-layer tactic changes against the previous release."""

    summary: str
    changed: list = []
    added: list = []
    removed: list = []


class EngineFigures(BaseModel):
    """The ``engine`` check's figures: what the target GPU measured.

    Written by ``engine_check`` into the manifest (as JSON, the manifest's format); read back through ``of``.
    """

    model_config = ConfigDict(extra="allow")
    accuracy: list[dict] = []  # per profile point: {profile, point, shapes, outputs: {name: figures}}
    latency: dict[str, dict] = {}  # profile index -> latency statistics (p50, p99, ...)
    trtexec: dict[str, dict] = {}
    ratio_to_trtexec_p50: dict[str, float] = {}
    memory_per_profile: list[int] | None = None
    contexts_that_fit: dict | list | None = None
    regressions: list[ProfileRegression] = []
    tactic_changes: TacticChanges | None = None

    @classmethod
    def of(cls, check: Check) -> EngineFigures:
        """The typed figures of a manifest's ``engine`` check (empty while the check is pending)."""
        return cls.model_validate(check.figures or {})

    def min_cosine(self) -> float | None:
        """The lowest cosine over every output at every profile point, if any was measured."""
        cos = [o["cosine_min"] for p in self.accuracy for o in p.get("outputs", {}).values()]
        return min(cos) if cos else None


def engine_figures(v) -> EngineFigures:
    """The figures of an ``EngineValidation`` (accuracy per profile point, latency, trtexec ratio, memory)."""
    accuracy = [{"profile": p.profile, "point": p.point, "shapes": p.shapes,
                 "outputs": {f.output: {"cosine_mean": f.cosine_mean, "cosine_min": f.cosine_min, "max_abs": f.max_abs,
                                        "max_rel": f.max_rel, **f.extra} for f in p.figures}} for p in v.points]
    latency = {str(i): s.to_json() for i, s in v.latency.items()}
    trtexec = {str(i): s.to_json() for i, s in v.trtexec.items()}
    ratio = {str(i): round(v.latency[i].p50 / s.p50, 3) for i, s in v.trtexec.items() if s.p50 > 0}
    return EngineFigures(accuracy=accuracy, latency=latency, trtexec=trtexec, ratio_to_trtexec_p50=ratio,
                         memory_per_profile=v.memory_per_profile, contexts_that_fit=v.contexts)


def engine_check(v, gpu_name: str, previous: Manifest | None = None,
                 max_p99_increase: float = 0.05) -> tuple[Check, dict[str, str], str]:
    """The ``engine`` check, the per-layer tactics and their digest.

    Fails on any accuracy miss, and on a p99 regression beyond ``max_p99_increase`` against the previous release.
    """
    figures = engine_figures(v)
    before = EngineFigures.of(previous.verification.engine).latency if previous else {}
    checked = [(i, r) for i, stats in figures.latency.items()
               if (r := regression_check(stats, before.get(i), "p99", max_p99_increase)) is not None]
    figures.regressions = [ProfileRegression(profile=i, text=r.describe(), regressed=r.regressed) for i, r in checked]
    if previous and previous.plan.tactics:
        diff = diff_tactics(previous.plan.tactics, v.tactics)
        figures.tactic_changes = TacticChanges(summary=diff.describe(), changed=diff.changed, added=diff.added,
                                               removed=diff.removed)
    problems = v.failures + [r.describe() for _, r in checked if r.regressed]
    p99 = ", ".join(f"profile {i} p99 {s['p99']:.3f} ms" for i, s in figures.latency.items())
    detail = (f"validated on {gpu_name}: " + ("; ".join(problems) if problems else f"accuracy within tolerance; {p99}"))
    doc = figures.model_dump(mode="json", exclude_none=True)
    return Check(status="failed" if problems else "passed", detail=detail, figures=doc), v.tactics, \
        tactics_digest(v.tactics)
