"""The ``trtfarm`` entry point: registers every command group, runs the app, and shows errors by their kind.

Every error trtfarm raises on purpose is one line, exiting by its kind: the user's input 2 (naming the fix), a failing
service or a mismatch 1, a service not there 3 (naming it); the app's group (``cli/common.py``: ``TrtfarmGroup``)
catches them once for every command. Anything else is a bug and keeps its traceback.
SIGTERM is turned into a clean exit, so temporary files and in-flight store writes are removed as on Ctrl-C.
"""

from __future__ import annotations

import signal
import sys

import typer
from typer.exceptions import TyperException

from trtfarm import interrupt, scratch
from trtfarm.cli import (  # noqa: F401
    build,
    farm,
    fleet,
    images,
    models,
    profiles,
    project,
    quality,
    serving,
    signing,
    store_ops,
    webhook,
)
from trtfarm.cli.common import app, err, message_text, plain_metavars
from trtfarm.extras import missing_extra

plain_metavars(app)


def main() -> None:
    """Console entry point."""
    signal.signal(signal.SIGTERM, interrupt.stop)
    signal.signal(signal.SIGINT, interrupt.stop)  # Ctrl-C unwinds the same way (exit 130)
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
    except interrupt.Interrupted:
        scratch.remove_all()  # what the signal caught mid-way (between creating a temporary and its cleanup)
        raise
    except ModuleNotFoundError as e:  # an optional module of an extra this install lacks: one line naming it
        extra = missing_extra(e)
        if extra is None:
            raise
        err.print(f"[bold red]error:[/] {message_text(str(extra))}", highlight=False, soft_wrap=not err.is_terminal)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
