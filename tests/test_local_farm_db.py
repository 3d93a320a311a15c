"""infra/local-farm/postgres.sh: private clusters on 127.0.0.1 that run side by side and leave nothing behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .farm_server import POSTGRES_SH

pytestmark = pytest.mark.integration


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", str(POSTGRES_SH), *args], capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def query(url: str, sql: str):
    import asyncpg

    async def run():
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(run())


def cluster_processes(pid: int) -> list[int]:
    """The postmaster ``pid`` and its children, those still alive."""
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return [p for p in [pid, *children] if Path(f"/proc/{p}").exists()]


def listening(port: int) -> bool:
    hexport = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[1].upper().endswith(hexport):
                return True
    return False


@pytest.fixture
def folders():
    made = [Path(tempfile.mkdtemp(prefix="trtfarm-pg-test-")) for _ in range(2)]
    yield made
    for d in made:
        sh("stop", str(d), check=False)
        shutil.rmtree(d, ignore_errors=True)


def test_two_clusters_run_side_by_side_keep_their_data_and_stop_without_a_trace(folders):
    with ThreadPoolExecutor(2) as pool:  # started at the same moment: no port or socket collision
        urls = list(pool.map(lambda d: sh("start", str(d)).stdout.strip(), folders))
    ports = {int(u.rsplit(":", 1)[1].split("/")[0]) for u in urls}
    assert len(ports) == 2 and all(u.startswith("postgresql+asyncpg://trtfarm:") and u.endswith("/prefect")
                                   for u in urls)
    assert all(u.split("@")[1].startswith("127.0.0.1:") for u in urls)
    for url in urls:
        assert query(url, "SHOW listen_addresses") == "127.0.0.1"
        assert query(url, "SHOW unix_socket_directories") == ""

    a, b = folders
    other = sh("createdb", str(a), "farm_one").stdout.strip()
    assert other == urls[0].rsplit("/", 1)[0] + "/farm_one" == sh("url", str(a), "farm_one").stdout.strip()
    query(other, "CREATE TABLE kept (x int)")
    pids = [int(sh("status", str(d)).stdout) for d in folders]
    assert all(cluster_processes(p) for p in pids)

    sh("stop", str(a))
    assert cluster_processes(pids[0]) == [] and not listening(int(urls[0].rsplit(":", 1)[1].split("/")[0]))
    assert sh("status", str(a), check=False).returncode == 3
    assert query(urls[1], "SELECT 1") == 1  # the other cluster is untouched

    again = sh("start", str(a)).stdout.strip()  # the same folder again: same password, its data kept
    assert query(again.rsplit("/", 1)[0] + "/farm_one", "SELECT count(*) FROM kept") == 0
    pid = int(sh("status", str(a)).stdout)
    for d in folders:
        sh("stop", str(d))
    assert cluster_processes(pid) == [] and cluster_processes(pids[1]) == []
    assert sh("stop", str(a)).returncode == 0  # stopping a stopped cluster is fine


@pytest.mark.skipif(os.geteuid() != 0, reason="the folder check applies when the cluster runs as user postgres")
def test_a_folder_the_cluster_user_cannot_reach_is_refused_in_one_line(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    done = sh("start", str(private / "db"), check=False)
    assert done.returncode == 1 and "cannot reach" in done.stderr and "/tmp" in done.stderr
    assert not (private / "db" / "data").exists()
