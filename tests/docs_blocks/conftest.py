"""The docs' blocks share the session's wheel and venvs; the farm block gets a Postgres folder of its own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ..docblocks import REPO
from ..docrun import Venvs, session_wheel, shared_folder


@pytest.fixture(scope="session")
def venvs(tmp_path_factory) -> Venvs:
    """One venv per install set for the whole session, whichever worker asks first making it."""
    root = shared_folder(tmp_path_factory) / "doc-venvs"
    root.mkdir(exist_ok=True)
    return Venvs(root, session_wheel(tmp_path_factory))


@pytest.fixture
def farm_folder():
    """A Postgres cluster folder of the test's own (the postgres user can reach it), never the docs' one."""
    folder = Path(tempfile.mkdtemp(prefix="trtfarm-docs-db-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder / "db"
    subprocess.run(["bash", "infra/local-farm/postgres.sh", "stop", str(folder / "db")], cwd=REPO, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)
