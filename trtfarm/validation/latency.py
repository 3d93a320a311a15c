"""Latency statistics as trtexec reports them, and the regression gate against the previous release."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of per-inference latency (ms); GPU compute and host overhead when they were measured apart."""

    samples: int
    batch: int
    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    throughput: float  # items (batch rows) per second at the mean latency
    compute_mean: float | None = None
    host_overhead_mean: float | None = None

    def to_json(self) -> dict:
        """Rounded figures for manifests and reports."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def latency_stats(latency_ms, batch: int, compute_ms=None) -> LatencyStats:
    """Summarise timed runs; with ``compute_ms``, host overhead = latency - GPU compute."""
    import numpy as np

    lat = np.asarray(latency_ms, dtype=np.float64)
    if lat.size == 0 or not np.isfinite(lat).all() or (lat < 0).any():
        raise ValueError("latency samples must be a non-empty list of non-negative milliseconds")
    p50, p90, p95, p99 = (float(np.percentile(lat, q)) for q in (50, 90, 95, 99))
    mean = float(lat.mean())
    compute = float(np.mean(compute_ms)) if compute_ms is not None and len(compute_ms) else None
    return LatencyStats(int(lat.size), batch, p50, p90, p95, p99, mean, batch * 1000.0 / mean, compute,
                        mean - compute if compute is not None else None)


def stats_from_trtexec_times(trace: list[dict], batch: int) -> LatencyStats:
    """Read a trtexec ``--exportTimes`` JSON trace: per-iteration ``latencyMs`` and ``computeMs``."""
    rows = [r for r in trace if isinstance(r, dict) and "latencyMs" in r]
    if not rows:
        raise ValueError("no iterations with 'latencyMs' in the trtexec times trace")
    return latency_stats([r["latencyMs"] for r in rows], batch, [r.get("computeMs", float("nan")) for r in rows])


@dataclass(frozen=True)
class Regression:
    """One metric compared with the previous release."""

    metric: str
    previous: float
    current: float
    change: float  # relative, +0.05 = 5% slower
    limit: float
    regressed: bool

    def describe(self) -> str:
        """``p99 2.10 -> 2.31 ms (+10.0%, limit +5%)``."""
        return (f"{self.metric} {self.previous:.3f} -> {self.current:.3f} ms ({self.change:+.1%}, limit "
                f"+{self.limit:.0%})" + (" REGRESSION" if self.regressed else ""))


def regression_check(current: dict, previous: dict | None, metric: str = "p99",
                     max_increase: float = 0.05) -> Regression | None:
    """Compare a latency figure with the previous release's (None when there is no previous figure)."""
    if not previous or metric not in previous or metric not in current or previous[metric] <= 0:
        return None
    change = current[metric] / previous[metric] - 1
    return Regression(metric, previous[metric], current[metric], change, max_increase, change > max_increase)
