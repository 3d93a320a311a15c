"""The farm benches at their smallest scale (tests/test_benches.py's rows), on one Postgres and Prefect server started
once for the module (``--server``): each still starts its own workers, pools and deployments on it and reads back only
the runs it made; run alone, each starts its own server as before."""

from __future__ import annotations

import pytest

from .farm_server import Farm
from .test_benches import ON_SHARED_SERVER, run_bench

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One Postgres and Prefect server for the module's farm benches; its URL."""
    farm = Farm(tmp_path_factory.mktemp("shared-farm"), {"PREFECT_LOGGING_LEVEL": "WARNING"})
    try:
        farm.start_server()
        yield farm.url
    finally:
        farm.stop()


@pytest.mark.parametrize("bench", sorted(ON_SHARED_SERVER))
def test_farm_bench_runs_at_its_smallest_scale(bench, shared_server):
    """The bench exits 0 at its smallest scale on the shared server and prints its figures."""
    run_bench(bench, "--server", shared_server)
