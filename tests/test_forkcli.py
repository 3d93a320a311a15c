"""The forking runner (tests/forkcli.py) against the thing it stands for: ``python -m trtfarm`` as a plain process.

Each command runs both ways, in the same folder and environment, and must exit and print the same. The cases pick
what a shared start could get wrong: a width read from the environment when the console is made (at import), a
variable that changes between two commands of one server, bad input (exit 2 and its one line), a command's own
module imported after the fork, and a command killed by its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from . import forkcli
from .fleets import ONE_RTX_TARGET


def plain(argv, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtfarm", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("forkcli")
    (path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    return path


CASES = [
    (["targets"], {"COLUMNS": "200"}),
    (["targets"], {"COLUMNS": "60"}),  # the console's width is read when it is made: a server of its own
    (["targets"], {"COLUMNS": "200", "NO_COLOR": "1", "TRTFARM_TARGETS": "nope.yaml"}),
    (["plans", "--store", "nowhere/at/all"], {"COLUMNS": "120"}),
    (["build", "missing.onnx"], {"COLUMNS": "120"}),
    (["status", "--json"], {"COLUMNS": "120"}),
    (["whatif", "--help"], {"COLUMNS": "100"}),
    (["no-such-command"], {"COLUMNS": "100"}),
]


@pytest.mark.parametrize("argv,extra", CASES, ids=[" ".join(a) + f" {e}" for a, e in CASES])
def test_a_forked_command_exits_and_prints_as_a_plain_process(folder, argv, extra):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_API"))}, **extra}
    want, got = plain(argv, env, folder), forkcli.trtfarm(argv, env=env, cwd=folder)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_a_server_serves_only_environments_that_agree_on_what_its_start_read(folder):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTFARM_")}
    server = forkcli.Server({**env, "COLUMNS": "91"})
    try:
        assert "COLUMNS" in server.read  # the console reads it when it is made
        assert server.serves({**env, "COLUMNS": "91", "PYTEST_CURRENT_TEST": "another"})
        assert not server.serves({**env, "COLUMNS": "92"})
        assert not server.serves({**env, "COLUMNS": "91", "PYTHONHASHSEED": "7"})  # read by the interpreter's start
        assert not server.serves({**env, "COLUMNS": "91", "TZ": "Asia/Tokyo"})  # read by `time` as it loads
    finally:
        server.close()


def test_a_command_past_its_timeout_is_killed_and_raises(folder):
    env = {**os.environ, "COLUMNS": "100", "PREFECT_API_URL": "http://127.0.0.1:9/api",  # a receiver serves
           "TRTFARM_WEBHOOK_SECRET": "a-secret-long-enough-for-the-receiver"}
    with pytest.raises(subprocess.TimeoutExpired):
        forkcli.trtfarm(["webhook", "serve", "--port", "0", "--store", str(folder / "s")], env=env, cwd=folder,
                        timeout=3)
    assert forkcli.trtfarm(["targets"], env=env, cwd=folder).returncode == 0  # the server goes on serving


def test_an_environment_in_which_the_imports_fail_gets_what_a_plain_process_gets(folder, tmp_path):
    (tmp_path / "rich").mkdir()
    (tmp_path / "rich/__init__.py").write_text("raise ImportError('a rich that does not load')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "100"}
    want, got = plain(["targets"], env, folder), forkcli.trtfarm(["targets"], env=env, cwd=folder)
    assert want.returncode == got.returncode == 1 and "a rich that does not load" in got.stderr
    assert (got.stdout, got.stderr) == (want.stdout, want.stderr)


def test_a_reply_that_arrives_with_the_one_before_it_is_read_at_once(folder):
    env = {**os.environ, "COLUMNS": "100"}
    server = forkcli.Server(env)
    try:
        request = {"argv": ["targets"], "env": env, "cwd": str(folder), "stdin": None}
        server.proc.stdin.write(json.dumps(request).encode() + b"\n")
        time.sleep(3)  # the command ends meanwhile: its pid and its exit wait in the pipe together
        assert "pid" in server._answer(10)
        done = server._answer(10)  # a line read ahead into a buffer would leave nothing for select to see
        server._remove(done)
    finally:
        server.close()
