"""Every command x every path it takes x every way a path goes wrong: one line naming the path, the exit the README
states, no traceback. The cases are generated from the typer app: each command's parameters, by their type.

A ``Path`` parameter has a role (a file or folder it reads, a file or folder it writes); ``--store`` is a store the
command reads or creates. A ``Path`` parameter with no role fails the test: a new command says what its paths are.
The README's exit codes are the referee: 2 for bad input (a path that does not exist, a file where a folder is
wanted, a folder where a file is, a store that is not there), 1 for a place that refuses a write (read-only).
Each case is ``python -m trtfarm ...`` after the interpreter's start: a fork of a process that has imported the
command line's entry point (tests/forkcli.py), which then imports its command's module as the command does.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys

import pytest

from trtfarm.cli.main import app

from . import forkcli
from .conftest import REPO

# (command, parameter) or parameter -> role
ROLES = {
    "model": "file-in", "profiles": "file-in", "calibration": "file-in", "heldout": "file-in", "log": "file-in",
    "prefect_file": "file-in", "dockerfile": "file-in", "targets_file": "file-in", "ref": "file-in",
    "folder": "folder-in", "context": "folder-in",
    ("init", "folder"): "folder-out", "repo": "folder-out", "out_dir": "folder-out",
    "out": "file-out", "out_path": "file-out", "to": "file-or-folder-out",
    "fleet": "file-in", ("whatif", "html"): "folder-out", ("status", "html"): "file-out",
}
CREATES_STORE = {"build", "models push", "webhook serve"}  # make the store when its folder exists
# required arguments that are not paths: a value that gets the command as far as its paths
REQUIRED = {"mode": "fp16", "reason": "checked", "pool": "rtx-4090", "model": "encoder", "manifest": "{manifest}",
            "ref": "{ref}", "channel": "stable", "target": "rtx-4090-rtx1.7"}


def commands(tapp=app, prefix=()):
    """(command words, callback) for every command of the app, groups walked (not a hidden alias: its command's)."""
    for c in tapp.registered_commands:
        if c.hidden:
            continue
        yield (*prefix, c.name or c.callback.__name__.replace("_", "-")), c.callback
    for g in tapp.registered_groups:
        yield from commands(g.typer_instance, (*prefix, g.name))


def params(callback):
    """(name, option flag or None for an argument, annotation text, required) of a command's parameters."""
    for name, p in inspect.signature(callback).parameters.items():
        info = p.default
        decls = getattr(info, "param_decls", ()) or ()
        flag = next((d for d in decls if d.startswith("--")), None)
        is_arg = type(info).__name__ == "ArgumentInfo"
        yield name, None if is_arg else flag or f"--{name.replace('_', '-')}", str(p.annotation), \
            getattr(info, "default", None) is ...


def role(command: str, name: str, annotation: str) -> str | None:
    if name == "store":
        return "store"
    if "Path" not in annotation:
        return None
    found = ROLES.get((command, name)) or ROLES.get(name)
    assert found, f"trtfarm {command}: parameter {name} is a path with no role here: add it to ROLES"
    return found


BAD = {  # role -> [(case, value, exit, words)]
    "file-in": [("missing", "{tmp}/no/such.file", 2, ["no/such.file", ("not exist", "no such")]),
                ("a-folder", "{tmp}/a-folder", 2, ["a-folder", ("folder", "directory")])],
    "folder-in": [("missing", "{tmp}/no/such-folder", 2, ["no/such-folder", ("not exist", "no such")]),
                  ("a-file", "{tmp}/a-file", 2, ["a-file", ("not a folder", "is a file")])],
    "folder-out": [("a-file", "{tmp}/a-file", 2, ["a-file", "is a file"]),
                   ("read-only", "{ro}/out", 1, ["read-only"])],
    "file-out": [("a-folder", "{tmp}/a-folder", 2, ["a-folder", "folder"]),
                 ("read-only", "{ro}/out.file", 1, ["read-only"])],
    "file-or-folder-out": [("read-only", "{ro}/out.plan", 1, ["read-only"])],
    "store": [("missing", "{tmp}/typo/store", 2, ["typo/store", "does not exist"])],
}


def cases():
    for words, callback in commands():
        command = " ".join(words)
        ps = list(params(callback))
        for name, _flag, annotation, _required in ps:
            r = role(command, name, annotation)
            for case, value, code, expect in BAD.get(r, []):
                yield pytest.param(words, ps, name, value, code, expect, id=f"{command}-{name}-{case}")


def _good(name: str, annotation: str, command: str) -> str:
    if "Path" in annotation:
        return {"file-in": {"model": "{model}", "ref": "{ref}", "fleet": "{fleet}"}.get(name, "{log}"),
                "folder-in": "{export}", "folder-out": "{tmp}/out-folder"}[role(command, name, annotation)]
    return REQUIRED[name]


@pytest.fixture(scope="module")
def world(tmp_path_factory, example_dir):
    """A store with the encoder built and pulled, files and folders to misuse, a read-only folder, no Prefect."""
    tmp = tmp_path_factory.mktemp("inputs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_", "AWS_"))}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env.update(COLUMNS="200", PREFECT_HOME=str(tmp / "prefect"), PREFECT_API_URL=f"http://127.0.0.1:{closed}/api",
               TRTFARM_WEBHOOK_SECRET="s3cret")
    store = tmp / "store"
    built = subprocess.run([sys.executable, "-m", "trtfarm", "build", str(example_dir / "model.onnx"), "--store",
                            str(store), "--targets-file", str(REPO / "gpu_targets.yaml"), "--target",
                            "rtx-4090-rtx1.7", "--json"], env=env, capture_output=True, text=True, check=True)
    manifest = json.loads(built.stdout)[0]["manifest"]
    (tmp / "a-folder").mkdir()
    (tmp / "a-file").write_text("x")
    (tmp / "shapes.jsonl").write_text('{"input_ids": [16, 87], "attention_mask": [16, 87]}\n')
    ro = tmp / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], check=True)
    yield {"tmp": str(tmp), "ro": str(ro), "store": str(store), "model": str(example_dir / "model.onnx"),
           "export": str(example_dir), "log": str(tmp / "shapes.jsonl"), "env": env,
           "fleet": str(REPO / "gpu_targets.yaml"),
           "manifest": manifest.removeprefix("file://"), "ref": manifest.removeprefix("file://")}
    subprocess.run(["umount", "-l", str(ro)], check=False)


@pytest.fixture(scope="module")
def trtfarm(world):
    """``trtfarm(argv)``: what ``python -m trtfarm ARGV`` did, run in ``world``'s folder and environment."""
    return lambda argv: forkcli.trtfarm(argv, env=world["env"], cwd=world["tmp"], timeout=300)


@pytest.mark.parametrize("words,ps,bad,value,code,expect", list(cases()))
def test_a_bad_path_is_one_line_naming_it_with_the_readmes_exit(world, trtfarm, words, ps, bad, value, code, expect):
    command = " ".join(words)
    argv = [*words]
    for name, flag, annotation, required in ps:
        if name == bad:
            given = value
        elif name == "store":
            given = "{store}"
        elif name == "server_wait":
            given = "0"
        elif required:
            given = _good(name, annotation, command)
        else:
            continue
        argv += [given.format(**world)] if flag is None else [flag, given.format(**world)]
    if bad == "store" and command in CREATES_STORE:
        expect = ["typo", "does not exist"]  # a store is made in a folder that exists; this one's folder does not
    done = trtfarm(argv)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == code, f"{argv}: exit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    assert len(errors) == 1 and "Traceback" not in done.stderr, f"{argv}\n{done.stderr[-3000:]}"
    for word in expect:
        options = word if isinstance(word, tuple) else (word,)
        assert any(w in errors[0] for w in options), f"{argv}: {errors[0]!r} does not say {word!r}"


def test_every_command_is_in_the_readme_table_with_an_exit_code_contract():
    readme = (REPO / "README.md").read_text()
    for words, _ in commands():
        assert f"| `trtfarm {' '.join(words)}" in readme or f"`trtfarm {words[0]} " in readme, words
