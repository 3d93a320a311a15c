"""README.md's farm block (docs/farm.md explains it line by line), after the quick start: Postgres, a Prefect server,
pools, deployments, three workers and two runs, the second answered from the store.

It runs on a port and a Postgres folder of its own, never the ones the docs tell users to use.
"""

from __future__ import annotations

import pytest

from ..docrun import run_marked_blocks


@pytest.mark.integration
def test_the_farm_block_builds_then_answers_from_the_store(request, venvs, tmp_path, farm_folder):
    ran = run_marked_blocks(request, venvs, tmp_path, farm_folder)
    farm = ran.of("prefect server start")
    first = farm[0].split("build-matrix run ", 1)[1]
    assert "COMPLETED" in first.split("\n", 1)[0] and "FAILED" not in farm[0], farm[0][-3000:]
    assert first.index("COMPLETED") < first.index("rtx-4090-rtx1.7")  # the state, then the table
    assert "every target is published already: no run started" in farm[0]
    deployed = farm[0].split("deployed ", 1)[1]
    assert deployed.startswith("8 deployments from prefect.yaml") and "prefect worker start" not in farm[0]
    assert len(deployed.split("registered encoder", 1)[0].splitlines()) <= 12  # quiet: pools, the lost-host automation
    assert "ProcessWorker" not in farm[0] and "telemetry" not in (ran.work / "prefect-server.log").read_text().lower()
    manifests = list((ran.work / "farm-store").rglob("manifest.json"))
    assert len(manifests) == 2 and len({p.parent.name for p in manifests}) == 1  # one portable build, two targets
