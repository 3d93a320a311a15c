"""Every command that takes a model, a target, a channel or a GPU key answers a near miss with the name meant.

The commands and their parameters are read from the app itself: every registered command, every parameter named
for one of those kinds (a name a person types, not a path), so a new command is covered without a line here. Each
gets a near miss of a real name (a letter dropped, or two swapped) on a small real store, and must print one
``error:`` line that says "did you mean" with the real name, and exit 2; a model name near nothing exits 2 too,
naming no one. Given a store where ``encoder`` waits in its candidate channel (and is registered), ``segmenter`` is
stable and ``detector`` only registered, a near miss of each is answered from every channel.
"""

from __future__ import annotations

import inspect
import os
import subprocess

import pytest
import typer

from . import forkcli
from .fleet_store import encoder_export
from .fleets import ONE_RTX_TARGET

TARGET = "rtx-4090-rtx1.7"
# the kind of name each parameter takes, by its name; a channel option is also known by its metavar (--from, --to)
KIND_BY_NAME = {"model": "model", "models": "model", "target": "target", "channel": "channel", "gpu": "gpu"}
REAL = {"model": "encoder", "target": TARGET, "channel": "candidate", "gpu": "rtx-4090"}
REAL_BY_PARAM = {"to": "stable"}  # promote --to: the channel moved
# parameters of those names that take no name the store or the fleet knows
NOT_NAMES = {("verify", "model"): "the model a plan on this host must be: verify reads no store (another is exit 1)"}
KIND_OF = {("report", "ref"): "model"}  # RUN_OR_MODEL
# what a command needs besides the name tried, to reach its check of names on this machine (no GPU, no server)
EXTRA = {"build": ["{root}/encoder/model.onnx"], "pull": ["--to", "{root}/pulled.plan"], "receipt": ["--ok"],
         "triton": ["--repo", "{root}/repo"], "farm run": ["--dry-run"],
         "whatif": ["--fleet", "{root}/gpu_targets.yaml"]}
ALSO = {"pull": ["gpu"]}  # kinds given their real name too (this machine has no GPU to pull for)
# (command, parameter) whose module this change does not own: each still answers a near miss without the name meant
PENDING: dict[tuple[str, str], str] = {}
NEAR_NOTHING_PENDING: set[tuple[str, str]] = set()


def _commands(app: typer.Typer, prefix: tuple[str, ...] = ()):
    """``(path, function)`` of every command the app registers, groups walked (a hidden alias is its command's)."""
    for info in app.registered_commands:
        if info.hidden:
            continue
        yield (*prefix, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for group in app.registered_groups:
        yield from _commands(group.typer_instance, (*prefix, group.name))


def _flag(name: str, info) -> str | None:
    """The option's flag (``--from``), or None for an argument."""
    if isinstance(info, typer.models.ArgumentInfo):
        return None
    return next((d for d in info.param_decls or () if d.startswith("--")), f"--{name.replace('_', '-')}")


def named_parameters() -> list[tuple[str, str, str | None, str, bool]]:
    """``(command, parameter, flag, kind, required)`` for each parameter that takes a model, target, channel or GPU."""
    from trtfarm.cli.main import registered

    found = []
    for path, function in _commands(registered()):
        command = " ".join(path)
        for name, p in inspect.signature(function).parameters.items():
            info = p.default
            kind = KIND_OF.get((command, name)) or KIND_BY_NAME.get(name) or \
                ("channel" if getattr(info, "metavar", None) == "CHANNEL" else None)
            if kind is None or "Path" in str(p.annotation) or (command, name) in NOT_NAMES:
                continue
            required = info.default is ... if hasattr(info, "default") else False
            found.append((command, name, _flag(name, info), kind, required))
    return found


def near_miss(name: str, swap: bool) -> str:
    """``name`` with its middle letter dropped, or (``swap``) that letter swapped with the one before it."""
    i = len(name) // 2
    return name[:i - 1] + name[i] + name[i - 1] + name[i + 1:] if swap else name[:i] + name[i + 1:]


def _argv(command: str, params, root, tried: str | None = None, value: str | None = None) -> list[str]:
    """The command line: ``tried`` given ``value``, every other required name (and ``ALSO``) its real one."""
    argv = command.split()
    for _, name, flag, kind, required in params:
        if name != tried and not required and kind not in ALSO.get(command, ()):
            continue
        given = value if name == tried else REAL_BY_PARAM.get(name, REAL[kind])
        argv += [given] if flag is None else [flag, given]
    return argv + [a.format(root=root) for a in EXTRA.get(command, ())]


PARAMS = named_parameters()
COMMANDS = {c: [p for p in PARAMS if p[0] == c] for c in dict.fromkeys(p[0] for p in PARAMS)}


def _marks(key: tuple[str, str], pending) -> list:
    return [pytest.mark.xfail(reason=PENDING[key], strict=True)] if key in pending else []


CASES = [pytest.param(command, name, kind, near_miss(REAL_BY_PARAM.get(name, REAL[kind]), n % 2 == 1),
                      id=f"{command}-{name}", marks=_marks((command, name), PENDING))
         for n, (command, name, _, kind, _) in enumerate(PARAMS)]
MODEL_CASES = [pytest.param(command, name, id=command, marks=_marks((command, name), NEAR_NOTHING_PENDING))
               for command, name, _, kind, _ in PARAMS if kind == "model"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``encoder`` built into its candidate channel and registered; ``segmenter`` stable; ``detector`` registered."""
    root = tmp_path_factory.mktemp("near-miss")
    (root / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": "",
           "TRTFARM_STORE": str(root / "store"), "TRTFARM_TARGETS": str(root / "gpu_targets.yaml"),
           "TRTFARM_ACCEPTED_RELEASES": str(root / "accepted.json")}
    env = {k: v for k, v in env.items() if not k.startswith("PREFECT_")}
    encoder = encoder_export(root / "encoder", 0)
    (encoder / "farm.yaml").write_text((encoder / "farm.yaml").read_text() + "promotion: {receipts: 1, soak_s: 0}\n")
    for args in (["build", str(encoder / "model.onnx")], ["models", "push", str(encoder)],
                 ["build", str(encoder_export(root / "segmenter", 1, name="segmenter") / "model.onnx")],
                 ["models", "push", str(encoder_export(root / "detector", 2, name="detector"))]):
        done = trtfarm(env, root, *args)
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return root, env


def trtfarm(env, root, *args) -> subprocess.CompletedProcess:
    return forkcli.trtfarm(args, env=env, cwd=root, timeout=300)


def _refused(done) -> str:
    """The one ``error:`` line of a command refused as bad input (exit 2, no traceback)."""
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return lines[0]


def test_the_generator_finds_every_kind_in_the_commands_that_take_them():
    found = {(c, n) for c, n, *_ in PARAMS}
    assert {("pull", "model"), ("pull", "gpu"), ("pull", "channel"), ("promote", "from_"), ("promote", "to"),
            ("receipt", "target"), ("farm run", "model"), ("farm run", "target"), ("build", "target"),
            ("sign", "models"), ("status", "models")} <= found, sorted(found)
    assert not {("build", "model"), ("precision", "model"), ("profiles derive", "model"), ("pull", "to")} & found
    assert near_miss("encoder", False) == "encder" and near_miss("encoder", True) == "enocder"


@pytest.mark.parametrize("command, name, kind, typo", CASES)
def test_a_near_miss_is_answered_with_the_name_meant(store, command, name, kind, typo):
    root, env = store
    said = _refused(trtfarm(env, root, *_argv(command, COMMANDS[command], root, name, typo)))
    meant = REAL_BY_PARAM.get(name, REAL[kind])
    assert f"did you mean {meant!r}?" in said and typo in said, said


@pytest.mark.parametrize("command, name", MODEL_CASES)
def test_a_model_name_near_nothing_is_refused_naming_the_known_ones(store, command, name):
    root, env = store
    said = _refused(trtfarm(env, root, *_argv(command, COMMANDS[command], root, name, "zqxjv")))
    assert "did you mean" not in said and "'zqxjv'" in said and "encoder" in said, said


@pytest.mark.parametrize("typo, meant", [("encodr", "encoder"), ("segmentr", "segmenter"), ("detectr", "detector")])
@pytest.mark.parametrize("command", [["pull", "--gpu", "rtx-4090"], ["history"], ["sign"]])
def test_the_nearest_model_comes_from_every_channel_and_the_registry(store, command, typo, meant):
    root, env = store
    said = _refused(trtfarm(env, root, command[0], typo, *command[1:]))
    assert f"did you mean {meant!r}?" in said and "known models: detector, encoder, segmenter" in said, said


def test_a_candidate_only_model_points_to_promote_and_the_candidate_channel(store):
    root, env = store
    said = _refused(trtfarm(env, root, "pull", "encoder", "--gpu", "rtx-4090", "--to", str(root / "x.plan")))
    assert "waits in the candidate channel" in said and "trtfarm promote encoder" in said and \
        "--channel candidate" in said and "Build it" not in said, said
    said = _refused(trtfarm(env, root, "receipt", "encoder", "--target", TARGET, "--ok"))
    assert "encoder has no stable release for rtx-4090-rtx1.7; its candidate channel has one: pass --channel " \
           "candidate, or trtfarm promote encoder moves it to stable" in said, said


def test_a_near_miss_of_a_command_suggests_it():
    """``trtfarm whatfi`` (and a near miss of every command of three letters or more) says "Did you mean 'whatif'?"."""
    from typer.testing import CliRunner

    from trtfarm.cli.main import registered

    app = registered()
    names = [c.name or c.callback.__name__ for c in app.registered_commands if not c.hidden]
    names += [g.name for g in app.registered_groups]
    assert "whatif" in names and "plan" not in names
    for name in (n for n in names if len(n) >= 3):
        for typo in {near_miss(name, swap) for swap in (False, True)} - {name}:
            said = CliRunner().invoke(app, [typo], env={"COLUMNS": "200"}).output
            assert f"No such command '{typo}'. Did you mean" in said and f"'{name}'" in said, (typo, said)
