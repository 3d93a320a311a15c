"""Every command block of README.md and docs/*.md runs as written, or says why not and what runs it instead.

The README's blocks that need nothing beyond this machine (quick start, precision, profiles, the router, Triton) run
here in order, top to bottom, in a copy of the repository: the quick start makes its own venv, and each later block
installs the extra it names. Blocks that need a GPU, AWS or Docker registries carry ``<!-- not run here: WHY -->``;
the test command (CI's), the wheel block and the farm block name the test that runs them (``<!-- run by PATH -->``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .docblocks import COMMANDS, REPO, all_blocks, blocks, without_comments


def test_every_command_block_is_run_or_says_why_not():
    for b in all_blocks():
        assert b.lang, f"{b.where}: say what the block is (bash, python, yaml, text)"
        if b.lang not in COMMANDS:
            continue
        if b.marker and b.marker.startswith("run by"):
            path = b.marker.split()[2]
            assert (REPO / path).is_file(), f"{b.where}: {path} is not there"
            assert b.doc.stem in (REPO / path).read_text(), f"{b.where}: {path} does not read {b.doc.name}"
        elif b.marker:
            assert b.marker.startswith("not run here: ") and len(b.marker) > 20, b.where
        else:
            assert b.doc.name == "README.md", f"{b.where}: only the README's unmarked blocks are run here; mark it"


def test_farm_md_explains_the_readme_farm_block_command_for_command():
    readme = next(b for b in blocks(REPO / "README.md") if "prefect server start" in b.text)
    farm = next(b for b in blocks(REPO / "docs/farm.md") if "prefect server start" in b.text)
    assert without_comments(farm.text) == without_comments(readme.text)


def runnable() -> list:
    return [b for b in blocks(REPO / "README.md") if b.lang in COMMANDS and b.marker is None]


def test_the_readme_runs_these_blocks_in_order():
    first = [b.text.split("\n", 1)[0][:40] for b in runnable()]
    assert first[0].startswith("python3 -m venv .venv && .venv/bin/pip")  # the quick start makes the venv
    assert len(first) == 7, first


@pytest.mark.integration
def test_the_readme_blocks_run_as_written(tmp_path):
    copy = tmp_path / "trtfarm"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name, follow_symlinks=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_", "VIRTUAL_ENV"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    outputs = []
    for b in runnable():
        script = b.text if b.lang != "python" else f".venv/bin/python - <<'EOF'\n{b.text}EOF\n"
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"{b.where}\n{script}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        outputs.append(proc.stdout)
    assert "2 built" in outputs[0]  # the quick start built the portable TensorRT-RTX plan for both RTX targets
    assert "trial build: fp16, the model's recipe is fp32" in outputs[1]
    written = (copy / "triton-repo/encoder/config.pbtxt").read_text()
    shown = next(b.text for b in blocks(REPO / "README.md") if b.text.startswith("# Written by `trtfarm triton"))
    assert written == shown  # the README shows the config this command writes
    fleet = next(i for i, b in enumerate(runnable()) if "trtfarm plan --fleet" in b.text)
    assert "toolchain: tensorrt 11.4.0.106 -> tensorrt 11.5.0.20" in " ".join(outputs[fleet].split())
    assert "fleet status:" in outputs[fleet] and "released" in outputs[fleet]  # the quick start's RTX plans
    assert (copy / "status.html").read_text().count('data-model="encoder"') == 1
    signed = next(i for i, b in enumerate(runnable()) if "TRTFARM_TRUSTED_KEYS" in b.text)
    assert "signature: signed by trusted key" in outputs[signed]  # the signed build, pulled with its public key
