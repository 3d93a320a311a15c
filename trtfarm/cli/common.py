"""What every command shares: the app, the consoles, the common options and how a failure is shown."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Build, validate and publish TensorRT-family plans for every GPU x toolchain in a fleet.")
out = Console()
err = Console(stderr=True)

STORE_OPT = typer.Option(None, "--store", help="artifact store: a path, file:///abs or s3://bucket/prefix "
                                               "[default: $TRTFARM_STORE or ./trtfarm-store]")
TARGETS_OPT = typer.Option(None, "--targets-file", help="gpu_targets.yaml [default: $TRTFARM_TARGETS or "
                                                        "./gpu_targets.yaml]")
JSON_OPT = typer.Option(False, "--json", help="machine-readable output on stdout")


def store_uri(store: str | None) -> str:
    """``--store``, else ``$TRTFARM_STORE``, else ``trtfarm-store`` under the working directory."""
    from trtfarm.store import default_store_uri

    return store or default_store_uri()


def targets_path(path: Path | None) -> str:
    """``--targets-file``, else ``$TRTFARM_TARGETS``, else ``gpu_targets.yaml`` in the working directory."""
    from trtfarm.planning.fleet import default_targets_file

    return str(path or default_targets_file())


def fail(message: str | Exception, code: int | None = None) -> typer.Exit:
    """Print one line (``error: ...``) and return the exit to raise.

    ``message`` is text (exit ``code``, default 2: the user's input) or one of trtfarm's errors, which exits with its
    kind's code (2 bad input, 1 a failure or mismatch, 3 a service not there) unless ``code`` says otherwise.
    """
    from trtfarm.errors import TrtfarmError, one_line

    if isinstance(message, TrtfarmError):
        text, code = one_line(message), code if code is not None else message.exit_code
    else:
        text, code = str(message), 2 if code is None else code
    err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)  # user text, not markup
    return typer.Exit(code)


def project_root() -> Path:
    """The checkout the flows' entrypoints are relative to (``$TRTFARM_HOME``, else where trtfarm is installed from)."""
    return Path(os.environ.get("TRTFARM_HOME") or Path(__file__).resolve().parents[2])
