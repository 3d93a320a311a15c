"""The farm commands' exit codes as the README states them, against a real Prefect server on Postgres:
`pools sync --check` exits 1 on drift (0 once synced)."""

from __future__ import annotations

import json

import pytest

from ..conftest import REPO
from ..farm_server import Farm

pytestmark = pytest.mark.integration
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090, count: 2}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""
README = (REPO / "README.md").read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("farm-exits")
    (home / "gpu_targets.yaml").write_text(FLEET)
    f = Farm(home, {"TRTFARM_STORE": (home / "store").as_uri(), "TRTFARM_TARGETS": str(home / "gpu_targets.yaml")})
    (home / "store").mkdir()
    try:
        f.start_server()
        yield f
    finally:
        f.stop()


def test_pools_sync_check_exits_1_on_drift_and_0_once_synced(server):
    assert "`--check` changes nothing and exits 1 on drift" in README
    before = server.trtfarm("pools", "sync", "--check", "--json", check=False)
    assert before.returncode == 1 and {r["action"] for r in json.loads(before.stdout)} == {"create"}, before.stderr
    server.trtfarm("pools", "sync")
    assert server.trtfarm("pools", "sync", "--check", check=False).returncode == 0
    (server.home / "gpu_targets.yaml").write_text(FLEET.replace("count: 2", "count: 1"))  # a GPU fewer: the limit
    changed = server.trtfarm("pools", "sync", "--check", "--json", check=False)
    assert changed.returncode == 1 and any(r["pool"] == "rtx-4090" and r["action"] != "ok"
                                           for r in json.loads(changed.stdout)), changed.stdout
    (server.home / "gpu_targets.yaml").write_text(FLEET)
