"""The benches that install venvs or run ModelOpt, at their smallest scale (tests/test_benches.py's rows)."""

from __future__ import annotations

import pytest

from .test_benches import INSTALLS, run_bench

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bench", sorted(INSTALLS))
def test_bench_runs_at_its_smallest_scale(bench):
    """The bench exits 0 at its smallest scale and prints its figures."""
    run_bench(bench)
