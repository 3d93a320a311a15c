"""The ``trtfarm`` entry point: registers every command group, runs the app, and shows errors by their kind.

Every error trtfarm raises on purpose is one line, exiting by its kind: the user's input 2 (naming the fix), a failing
service or a mismatch 1, a service not there 3 (naming it); the app's group (``cli/common.py``: ``TrtfarmGroup``)
catches them once for every command. Anything else is a bug and keeps its traceback.
SIGTERM is turned into a clean exit, so temporary files and in-flight store writes are removed as on Ctrl-C.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys

import typer
from typer.exceptions import TyperException

from trtfarm import interrupt
from trtfarm.cli.common import err, message_text, plain_metavars
from trtfarm.extras import missing_extra

# The module of trtfarm.cli that registers each command and command group, in the order `trtfarm --help` lists them.
# `trtfarm COMMAND ...` imports that module only; help, a typo or no command import them all
# (tests/test_cli.py holds this table to the commands the modules register).
COMMAND_MODULES = {
    "build": "build_commands", "targets": "build_commands", "plans": "build_commands", "show": "build_commands",
    "worker": "worker_commands", "pools": "farm", "farm": "farm",
    "whatif": "fleet_commands", "plan": "fleet_commands", "status": "fleet_commands",
    "images": "image_commands", "models": "models", "profiles": "profiles", "init": "project",
    "precision": "quality", "report": "quality", "triton": "serving", "sign": "signing",
    "release": "store_ops", "pull": "store_ops", "verify": "store_ops", "gc": "store_ops",
    "cache": "cache_commands",
    "webhook": "webhook_commands",
    "promote": "channel_commands", "rollback": "channel_commands", "history": "channel_commands",
    "receipt": "channel_commands",
}


# Python looks for garbage cycles every 700 net allocations by default. A command's start (typer's parameters, the
# vocabulary's pydantic models, rich) creates some 100,000 long-lived objects, and scanning them again and again took a
# tenth of a short command's CPU. The command line looks 140 times less often: still every 100,000 net allocations,
# so a long-running command (a worker, the webhook receiver) keeps collecting.
GC_FIRST_THRESHOLD = 100_000


# pydantic looks up its plugins (the entry points of every installed distribution: 10 to 40 ms in an environment
# with Prefect and TensorRT) when it builds its first validator. trtfarm's models use none, so a command that ends
# (build, pull, ...) starts without them; the long-running ones, which run other code (a worker's flow runs, the
# webhook receiver), keep them. PYDANTIC_DISABLE_PLUGINS set in the environment, even empty, is left as it is.
KEEPS_PYDANTIC_PLUGINS = ("worker", "webhook")


# nanobind modules report the objects still alive at interpreter exit as leaked, one line each: with the collector
# frozen (``main``) that is every object of theirs, some 30 lines after the command's result. lief, which ModelOpt
# imports (``precision``, ``build --precision``), is one; each module here is told not to report, where loaded.
NANOBIND_LEAK_SWITCHES = {"lief": "disable_leak_warning"}


def registered(command: str | None = None) -> typer.Typer:
    """The app, with the module that registers ``command`` imported, or every command module (``command`` None).

    Typer runs an app of one command as that command: a module that registers only one gets the others too.
    """
    from trtfarm.cli.common import app

    modules = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else COMMAND_MODULES.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(f"trtfarm.cli.{module}")
    if len(app.registered_commands) + len(app.registered_groups) < 2:
        return registered()
    plain_metavars(app)
    return app


def __getattr__(name: str):
    """``from trtfarm.cli.main import app``: the app with every command registered."""
    if name == "app":
        return registered()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point.

    At the end the garbage collector is frozen: at exit Python looks for cycles among every object the command
    made (typer's parameters, pydantic's schemas, rich), which took 40 to 70 ms of a command of 0.3 s. Exit handlers
    still run and every object is still released as its module is cleared; only cycles are left to the operating
    system, which takes the whole process back anyway.
    """
    try:
        _main()
    finally:
        quiet_nanobind_leaks()
        gc.freeze()


def quiet_nanobind_leaks() -> None:
    """Turn off the leak report of every module of ``NANOBIND_LEAK_SWITCHES`` that is loaded (importing none)."""
    if not any(name in sys.modules for name in NANOBIND_LEAK_SWITCHES):  # (most commands: nothing to look up)
        return
    from trtfarm.precision.deferred import loaded

    for name, switch in NANOBIND_LEAK_SWITCHES.items():
        module = loaded(name)  # a stand-in never read (precision/deferred.py) is left unloaded
        if module is not None and callable(getattr(module, switch, None)):
            getattr(module, switch)()


def _main() -> None:
    gc.set_threshold(GC_FIRST_THRESHOLD, *gc.get_threshold()[1:])
    signal.signal(signal.SIGTERM, interrupt.stop)
    signal.signal(signal.SIGINT, interrupt.stop)  # Ctrl-C unwinds the same way (exit 130)
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command not in KEEPS_PYDANTIC_PLUGINS:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    app = registered(command)
    try:
        code = app(standalone_mode=False)
    except TyperException as e:  # click's usage errors, as typer carries them: one line, as every other bad input
        if type(e).__name__ != "NoArgsIsHelpError":  # (that one has shown the help already)
            where = getattr(getattr(e, "ctx", None), "command_path", None) or "trtfarm"
            text = f"{where}: {e.format_message().rstrip('.')}; see `{where} --help`"
            err.print(f"[bold red]error:[/] {message_text(text)}", highlight=False, soft_wrap=not err.is_terminal)
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(1)
    except interrupt.Interrupted as stopped:
        from trtfarm import scratch  # (imported by whatever made a temporary: --help and a typo need none)

        scratch.remove_all()  # what the signal caught mid-way (between creating a temporary and its cleanup)
        err.print(message_text(interrupt.stopped_line(int(stopped.code or 130))), highlight=False,
                  soft_wrap=not err.is_terminal)
        raise
    except ModuleNotFoundError as e:  # an optional module of an extra this install lacks: one line naming it
        extra = missing_extra(e)
        if extra is None:
            raise
        err.print(f"[bold red]error:[/] {message_text(str(extra))}", highlight=False, soft_wrap=not err.is_terminal)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
