"""Every command block of README.md and docs/*.md runs as written, or says why not and what runs it instead.

A block marked ``<!-- run by tests/test_doc_blocks.py -->`` runs here as a user runs it: in a clone of the repository
outside it (README.md top to bottom, then docs/*.md by name: fleet-views.md, precision.md, profiles.md, serving.md,
signing.md), each block twice in a row, in a venv that holds exactly what the text installs, from the wheel
(tests/docrun.py says how the install set is read). "Your model" is a conv net of the test's own, not the bundled
encoder. The farm block runs on a port and a Postgres folder of its own, never the ones the docs tell users to use.
After every block has run twice, the clone has nothing to commit: what the blocks write (stores, keys, plans,
repositories) is covered by .gitignore. Blocks that need a GPU, AWS or Docker registries carry
``<!-- not run here: WHY -->``; the test command (CI's) is ``run by .ci/run``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from .docblocks import COMMANDS, REPO, Block, all_blocks, blocks, without_comments
from .docrun import (
    Venvs,
    clone,
    from_wheel,
    install_set,
    link_venv,
    own_venv,
    session_wheel,
    shared_folder,
    unlink_venv,
    user_env,
)
from .farm_server import free_port
from .models import write_small_cnn

HERE = "tests/test_doc_blocks.py"
DOCS_DB, DOCS_PORT = "/var/tmp/trtfarm-db", "4200"  # what the docs tell users to use: never touched here
RUNS = 2


def run_here() -> list[Block]:
    """The blocks this test runs, in document order (README first, then docs/*.md)."""
    return [b for b in all_blocks() if b.lang in COMMANDS and b.marker and b.marker.split()[2].rstrip(",") == HERE
            and "the README's farm block" not in b.marker]


def readme(text: str) -> Block:
    return next(b for b in run_here() if text in b.text)


def test_every_command_block_is_run_or_says_why_not():
    for b in all_blocks():
        assert b.lang, f"{b.where}: say what the block is (bash, python, yaml, text)"
        if b.lang not in COMMANDS:
            continue
        assert b.marker, f"{b.where}: mark it <!-- run by {HERE} --> or <!-- not run here: WHY -->"
        if b.marker.startswith("run by"):
            path = b.marker.split()[2].rstrip(",")
            assert (REPO / path).is_file(), f"{b.where}: {path} is not there"
            assert b.doc.stem in (REPO / path).read_text(), f"{b.where}: {path} does not read {b.doc.name}"
        else:
            assert b.marker.startswith("not run here: ") and len(b.marker) > 20, b.where


def test_farm_md_explains_the_readme_farm_block_command_for_command():
    readme_farm = next(b for b in blocks(REPO / "README.md") if "prefect server start" in b.text)
    farm = next(b for b in blocks(REPO / "docs/farm.md") if "prefect server start" in b.text)
    assert without_comments(farm.text) == without_comments(readme_farm.text)
    assert "the README's farm block" in farm.marker  # run as the README's


def test_the_install_sets_are_what_the_text_installs():
    quick = run_here()[0]
    assert quick.text.startswith("python3 -m venv .venv") and own_venv(quick)
    sets = {b.where: install_set(b, quick) for b in run_here()}
    assert set(sets.values()) == {frozenset({"rtx"}), frozenset({"rtx", "precision"}), frozenset({"rtx", "profiles"}),
                                  frozenset({"rtx", "profiles", "triton"}), frozenset({"rtx", "farm"})}, sets
    assert sets[readme("prefect server start").where] == {"rtx", "farm"}  # no [reports]: charts are optional


@pytest.fixture(scope="session")
def venvs(tmp_path_factory):
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


def _run(block: Block, script: str, cwd: Path, env: dict, log: Path, timeout: int = 1200) -> str:
    """One run of a block: exit 0 (else the test fails with its output); its background jobs are stopped after."""
    script = script if block.lang != "python" else f".venv/bin/python - <<'EOF'\n{script}EOF\n"
    (log.parent / f"{log.name}.sh").write_text("set -euo pipefail\n" + script)
    with open(log, "w") as out, open(f"{log}.err", "w") as errs:  # files: background jobs keep pipes open
        proc = subprocess.Popen(["bash", f"{log}.sh"], cwd=cwd, env=env, stdout=out, stderr=errs,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the block's server and workers share its process group
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
    stdout, stderr = log.read_text(), Path(f"{log}.err").read_text()
    assert proc.returncode == 0, f"{block.where} exit {proc.returncode}\n{script}\n{stdout[-3000:]}\n{stderr[-4000:]}"
    assert "Traceback" not in stdout + stderr, f"{block.where}\n{stderr[-4000:]}"
    return stdout + "\n--- stderr ---\n" + stderr


@pytest.mark.integration
def test_every_run_block_runs_twice_from_the_wheel_in_a_minimal_venv(venvs, tmp_path, farm_folder):
    home = tmp_path / "home"
    home.mkdir()
    work = clone(home / "trtfarm")
    write_small_cnn(home / "myproject" / "model.onnx")  # your model: not the encoder
    env = user_env(home)
    quick = run_here()[0]
    outputs: dict[str, list[str]] = {}
    try:
        run_blocks(venvs, work, env, farm_folder, tmp_path, quick, outputs)
    finally:
        unlink_venv(work)
    check_outputs(outputs, work, home)
    leftover = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=work, capture_output=True,
                              text=True, check=True).stdout
    assert leftover == "", f"the blocks left files that .gitignore does not cover:\n{leftover}"


def run_blocks(venvs, work, env, farm_folder, tmp_path, quick, outputs) -> None:
    """Each block in document order, twice, in the venv of its install set."""
    for b in run_here():
        venv = venvs.get(install_set(b, quick))
        link_venv(work, venv)
        script = from_wheel(b.text, venvs.wheel)
        for run in range(RUNS):
            text = script
            if DOCS_DB in b.text:  # the farm block, on a port and a cluster folder of its own
                port = str(free_port())
                text = text.replace(DOCS_DB, str(farm_folder)).replace(f"--port {DOCS_PORT}", f"--port {port}")
                text = text.replace(f"127.0.0.1:{DOCS_PORT}", f"127.0.0.1:{port}")
                subprocess.run(["bash", "infra/local-farm/postgres.sh", "stop", str(farm_folder)], cwd=work,
                               capture_output=True)  # the first run's cluster: a user stops it before starting again
            outputs.setdefault(b.where, []).append(_run(b, text, work, env, tmp_path / f"b{b.line}-{run}.log"))


def check_outputs(outputs: dict[str, list[str]], work: Path, home: Path) -> None:
    """What each block must say, first and second time."""
    quick, project = outputs[readme("make_model.py").where], outputs[readme("~/myproject").where]
    assert "2 built" in quick[0] and "2 up-to-date" in quick[1]
    assert "built-in fleet" in project[0] and "2 built" in project[0] and "wrote" in project[0]
    assert "2 up-to-date" in project[1] and project[1].count("kept ") == 4 and "nothing written" in project[1]
    assert "rtx-4090-rtx1.7" in project[1].rsplit("targets (", 1)[1]  # the written fleet names it as the built-in did
    assert "name: myproject" in (home / "myproject/farm.yaml").read_text()
    precision = outputs[readme("--precision fp16").where]
    assert all("trial build: fp16, the model's recipe is fp32" in o for o in precision[:1])
    signed = outputs[readme("TRTFARM_TRUSTED_KEYS").where]
    assert all("signature: signed by trusted key" in o for o in signed)
    written = (work / "triton-repo/encoder/config.pbtxt").read_text()
    shown = next(b.text for b in blocks(REPO / "docs/serving.md") if b.text.startswith("# Written by `trtfarm triton"))
    assert written == shown  # docs/serving.md shows the config this command writes
    farm = outputs[readme("prefect server start").where]
    first = farm[0].split("build-matrix run ", 1)[1]
    assert "COMPLETED" in first.split("\n", 1)[0] and "FAILED" not in farm[0], farm[0][-3000:]
    assert first.index("COMPLETED") < first.index("rtx-4090-rtx1.7")  # the state, then the table
    assert "every target is published already: no run started" in farm[0] and "FAILED" not in farm[1]
    deployed = farm[0].split("deployed ", 1)[1]
    assert deployed.startswith("8 deployments from prefect.yaml") and "prefect worker start" not in farm[0]
    assert len(deployed.split("registered encoder", 1)[0].splitlines()) <= 12  # quiet: pools, the lost-host automation
    assert "ProcessWorker" not in farm[0] and "telemetry" not in (work / "prefect-server.log").read_text().lower()
    manifests = list((work / "farm-store").rglob("manifest.json"))
    assert len(manifests) == 2 and len({p.parent.name for p in manifests}) == 1  # one portable build, two targets
    for fleet in outputs[readme("trtfarm plan --fleet").where]:  # read-only: the same both times
        assert "toolchain: tensorrt 11.4.0.106 -> tensorrt 11.5.0.20" in " ".join(fleet.split())
        assert "fleet status:" in fleet and "released" in fleet  # the quick start's RTX plans
    assert (work / "status.html").read_text().count('data-model="encoder"') == 1
