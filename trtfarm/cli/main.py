"""The ``trtfarm`` entry point: registers every command group, runs the app, and shows errors by their kind.

Every error trtfarm raises on purpose is one line, exiting by its kind: the user's input 2 (naming the fix), a failing
service or a mismatch 1, a service not there 3 (naming it); anything else is a bug and keeps its traceback.
SIGTERM is turned into a clean exit, so temporary files and in-flight store writes are removed as on Ctrl-C.
"""

from __future__ import annotations

import signal
import sys

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
    store_ops,
    webhook,
)
from trtfarm.cli.common import app, err, message_text, plain_metavars
from trtfarm.errors import TrtfarmError, one_line
from trtfarm.extras import missing_extra

plain_metavars(app)


def main() -> None:
    """Console entry point."""
    signal.signal(signal.SIGTERM, interrupt.stop)
    signal.signal(signal.SIGINT, interrupt.stop)  # Ctrl-C unwinds the same way (exit 130)
    try:
        app()
    except interrupt.Interrupted:
        scratch.remove_all()  # what the signal caught mid-way (between creating a temporary and its cleanup)
        raise
    except TrtfarmError as e:  # raised on purpose, by kind: exit 2 bad input, 1 a failure or mismatch, 3 no service
        err.print(f"[bold red]error:[/] {message_text(one_line(e))}", highlight=False, soft_wrap=not err.is_terminal)
        sys.exit(e.exit_code)
    except ModuleNotFoundError as e:  # an optional module of an extra this install lacks: one line naming it
        extra = missing_extra(e)
        if extra is None:
            raise
        err.print(f"[bold red]error:[/] {message_text(str(extra))}", highlight=False, soft_wrap=not err.is_terminal)
        sys.exit(2)
