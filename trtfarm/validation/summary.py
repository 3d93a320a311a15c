"""Turn a GPU validation into the manifest's ``engine`` check: figures, regressions, tactic changes (CPU only)."""

from __future__ import annotations

from trtfarm.publishing.manifest import Check, Manifest
from trtfarm.validation.latency import regression_check
from trtfarm.validation.tactics import diff_tactics, tactics_digest


def engine_figures(v) -> dict:
    """Plain JSON of an ``EngineValidation`` (accuracy per profile point, latency, trtexec ratio, memory)."""
    accuracy = [{"profile": p.profile, "point": p.point, "shapes": p.shapes,
                 "outputs": {f.output: {"cosine_mean": f.cosine_mean, "cosine_min": f.cosine_min, "max_abs": f.max_abs,
                                        "max_rel": f.max_rel, **f.extra} for f in p.figures}} for p in v.points]
    latency = {str(i): s.to_json() for i, s in v.latency.items()}
    trtexec = {str(i): s.to_json() for i, s in v.trtexec.items()}
    ratio = {str(i): round(v.latency[i].p50 / s.p50, 3) for i, s in v.trtexec.items() if s.p50 > 0}
    return {"accuracy": accuracy, "latency": latency, "trtexec": trtexec, "ratio_to_trtexec_p50": ratio,
            "memory_per_profile": v.memory_per_profile, "contexts_that_fit": v.contexts}


def engine_check(v, gpu_name: str, previous: Manifest | None = None,
                 max_p99_increase: float = 0.05) -> tuple[Check, dict[str, str], str]:
    """The ``engine`` check, the per-layer tactics and their digest.

    Fails on any accuracy miss, and on a p99 regression beyond ``max_p99_increase`` against the previous release.
    """
    figures = engine_figures(v)
    before = previous.verification.engine.figures.get("latency", {}) if previous else {}
    regressions = [r for i, stats in figures["latency"].items()
                   if (r := regression_check(stats, before.get(i), "p99", max_p99_increase)) is not None]
    figures["regressions"] = [{"profile": i, "text": r.describe(), "regressed": r.regressed}
                              for i, r in zip(figures["latency"], regressions, strict=False)]
    if previous and previous.plan.tactics:
        diff = diff_tactics(previous.plan.tactics, v.tactics)
        figures["tactic_changes"] = {"summary": diff.describe(), "changed": diff.changed, "added": diff.added,
                                     "removed": diff.removed}
    problems = v.failures + [r.describe() for r in regressions if r.regressed]
    p99 = ", ".join(f"profile {i} p99 {s['p99']:.3f} ms" for i, s in figures["latency"].items())
    detail = (f"validated on {gpu_name}: " + ("; ".join(problems) if problems else f"accuracy within tolerance; {p99}"))
    return Check(status="failed" if problems else "passed", detail=detail, figures=figures), v.tactics, \
        tactics_digest(v.tactics)
