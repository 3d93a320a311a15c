"""What a person sees in a terminal of 80 columns, read from tmux's own screen: build, targets, plans, show, verify,
report, triton, and each --wide. No word is split across lines (the same command at 400 columns is the referee), and
a line that wraps keeps its indent: a continuation never starts at column 0 under an indented note.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import REPO
from .test_screens import split_words

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is Debian's package tmux")
WIDER = "(config.pbtxt is wider than this terminal: cat it to read it)"
BOX = "│┃┌┏└┗├┡┝╇┬┳┴┻┼╋─━╭╰"


def on_tmux(args: list[str], cwd, columns: int) -> str:
    """Run ``trtfarm ARGS`` in a tmux window of ``columns`` x 300 on a socket of its own; the screen as shown."""
    sock, done = f"trtfarm-test-{uuid.uuid4().hex[:8]}", cwd / f".done-{uuid.uuid4().hex[:8]}"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in {"PREFECT_HOME": str(cwd / ".prefect"), "TERM": "xterm-256color",
                                                         "PATH": os.environ["PATH"]}.items())
    command = f"cd {shlex.quote(str(cwd))} && env -u TRTFARM_TARGETS -u COLUMNS {env} " \
              f"{shlex.join([sys.executable, '-m', 'trtfarm', *args])}; touch {shlex.quote(str(done))}; sleep 600"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", str(columns), "-y", "300", "bash", "-c", command], check=True)
    try:
        deadline = time.monotonic() + 300
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists(), f"trtfarm {args} did not finish in tmux"
        return subprocess.run([*tmux, "capture-pane", "-p", "-S", "-", "-E", "-"], capture_output=True, text=True,
                              check=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def unindented_continuations(screen: str) -> list[str]:
    """Lines that continue an indented note (the line above filled the width) but start further left."""
    lines = [line.rstrip() for line in screen.splitlines()]
    found = []
    for above, line in zip(lines, lines[1:], strict=False):
        indent = len(above) - len(above.lstrip(" "))
        if indent and above.strip() and above.strip()[0] not in BOX and len(above) >= 70 and line.strip() \
                and line.strip()[0] not in BOX and len(line) - len(line.lstrip(" ")) < indent:
            found.append(line)
    return found


@pytest.fixture(scope="module")
def project(tmp_path_factory, example_dir):
    """The repository's fleet, the encoder built and released for its RTX targets, its plan pulled."""
    folder = tmp_path_factory.mktemp("screens")
    shutil.copy(REPO / "gpu_targets.yaml", folder / "gpu_targets.yaml")
    shutil.copytree(example_dir, folder / "encoder")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    built = subprocess.run([sys.executable, "-m", "trtfarm", "build", "encoder/model.onnx", "--json"], cwd=folder,
                           env=env, capture_output=True, text=True, timeout=600, check=True)
    manifest = next(r["manifest"] for r in json.loads(built.stdout) if r["status"] == "built")
    subprocess.run([sys.executable, "-m", "trtfarm", "pull", "encoder", "--gpu", "rtx-4090", "--to", "enc.plan"],
                   cwd=folder, env=env, capture_output=True, check=True, timeout=300)
    return folder, manifest.removeprefix("file://")


COMMANDS = {
    "build": ["build", "encoder/model.onnx"], "build --wide": ["build", "encoder/model.onnx", "--wide"],
    "targets": ["targets"], "targets --wide": ["targets", "--wide"], "plans": ["plans"],
    "plans --wide": ["plans", "--wide"], "show": ["show", "{manifest}"], "verify": ["verify", "enc.plan"],
    "report": ["report", "encoder", "--out", "rep"], "triton": ["triton", "encoder", "--repo", "triton-repo"],
}


@pytest.mark.integration
@pytest.mark.parametrize("name", list(COMMANDS))
def test_at_80_columns_no_word_is_split_and_wrapped_lines_keep_their_indent(project, name):
    folder, manifest = project
    screens = {w: on_tmux([a.format(manifest=manifest) for a in COMMANDS[name]], folder, w) for w in (80, 400)}
    narrow, wide = screens[80], screens[400]
    if name == "triton":  # the config file is printed where its lines fit; where they are wider it says so instead
        config = (folder / "triton-repo" / "encoder" / "config.pbtxt").read_text()
        fits = max(map(len, config.splitlines())) <= 80
        assert (WIDER in narrow) is not fits and WIDER not in wide, narrow
        assert fits is ("backend: \"python\"" in narrow), narrow  # the RTX plans' Python-backend config fits
        narrow = narrow.replace(WIDER, "")
        shown = set(config.splitlines())  # the file as written: its own lines, not wrapped text
        narrow = "\n".join("" if line.rstrip() in shown else line for line in narrow.splitlines())
    assert "Traceback" not in narrow and "error:" not in narrow, narrow
    long = [t for t in wide.split() if len(t) > 60]  # a path or URL longer than a column may fold, nothing else
    split = [t for t in split_words(narrow, wide) if not any(t in whole for whole in long)]
    assert split == [], (name, split, narrow)
    assert (found := unindented_continuations(narrow)) == [], (name, found, narrow)
    if name in ("plans --wide", "build --wide", "plans"):
        assert "encoder/rtx-4090/" in narrow  # the id show takes, whole
