"""The README's one-machine farm, run as written, top to bottom: Postgres, the Prefect server, pools, deployments,
three `trtfarm worker` processes, a registered model and two farm runs (the second answered from the store)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import REPO
from .farm_server import free_port

pytestmark = pytest.mark.integration
DOCS_DB, DOCS_PORT = "/var/tmp/trtfarm-db", "4200"  # what the README tells users to use: the test never touches them
LOGS = ["prefect-server.log", "worker-trtfarm-control.log", "worker-rtx-4090.log", "worker-rtx-5090.log"]


def farm_block() -> str:
    section = (REPO / "README.md").read_text().split("## A farm", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def private_db():
    """A cluster folder of the test's own (searchable by the postgres user), never the one the README names."""
    folder = Path(tempfile.mkdtemp(prefix="trtfarm-readme-db-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder / "db"
    subprocess.run(["bash", "infra/local-farm/postgres.sh", "stop", str(folder / "db")], cwd=REPO, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def readme_farm():
    if not (REPO / "examples/encoder/model.onnx").is_file():  # the quick start made it
        subprocess.run([sys.executable, "examples/encoder/make_model.py"], cwd=REPO, check=True)
    if not (REPO / ".venv/bin/trtfarm").exists():
        pytest.fail("the README's commands run from the repository's .venv: install it as the README says")
    shutil.rmtree(REPO / "farm-store", ignore_errors=True)
    procs = []
    yield procs
    for proc in procs:  # the block's background jobs (server, workers) share its process group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(REPO / "farm-store", ignore_errors=True)
    for log in LOGS:
        (REPO / log).unlink(missing_ok=True)


def test_the_readme_farm_runs_as_written(readme_farm, private_db, tmp_path):
    block = farm_block()
    assert DOCS_DB in block and f"--port {DOCS_PORT}" in block, "the README's block changed: update DOCS_DB/DOCS_PORT"
    # the block as written, on a port and a cluster folder of the test's own (a farm set up from the docs survives)
    block = block.replace(DOCS_DB, str(private_db)).replace(DOCS_PORT, str(free_port()))
    script = tmp_path / "farm.sh"
    script.write_text("set -euo pipefail\n" + block)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TRTFARM_"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # everything else exactly as the README exports it
    # files, not pipes: the block's background jobs (server, workers) keep what they inherit open until killed
    with open(tmp_path / "farm.out", "w") as out_file, open(tmp_path / "farm.log", "w") as log:
        proc = subprocess.Popen(["bash", str(script)], cwd=REPO, env=env, stdout=out_file, stderr=log,
                                start_new_session=True)
        readme_farm.append(proc)
        proc.wait(timeout=600)
    out = (tmp_path / "farm.out").read_text()
    assert proc.returncode == 0, (tmp_path / "farm.log").read_text()[-4000:]
    assert "COMPLETED" in out and out.count("built") >= 2, out[-3000:]
    assert "every target is published already: no run started" in out, out[-3000:]
    # quiet and ordered: what trtfarm deployed in a few lines, no worker log in the terminal, no telemetry attempt
    deployed = out.split("deployed ", 1)[1].split("\n")
    assert deployed[0].startswith("7 deployments from prefect.yaml") and "prefect worker start" not in out, out
    words = " ".join(out.split())  # Rich wraps at 80 columns in a file
    assert "pool trtfarm-control: build-matrix/build-matrix, build-matrix/on-export, build-matrix/refit" in words
    assert len(out.split("deployed ", 1)[1].split("registered encoder", 1)[0].splitlines()) <= 10
    worker_logs = "".join((REPO / log).read_text() for log in LOGS[1:])
    assert "ProcessWorker" in worker_logs and "ProcessWorker" not in out, out[-3000:]
    assert "telemetry" not in (REPO / "prefect-server.log").read_text().lower()
    first_run = out.split("build-matrix run ", 1)[1]
    assert first_run.index("COMPLETED") < first_run.index("rtx-4090-rtx1.7")  # the state, then the table
    manifests = [p for p in (REPO / "farm-store").rglob("manifest.json")]
    assert len(manifests) == 2 and len({p.parent.name for p in manifests}) == 1  # one portable build, two targets
