"""``trtfarm ARGS`` in this process, as typer's ``CliRunner`` runs it, with the click command built once.

typer's ``CliRunner.invoke`` turns the Typer app into its click command on every call: every command's signature
and type hints read again, about 90 ms of a call (on the 2-core test machine) whose command often takes less. The
matrices that invoke thousands of commands build it once (``COMMAND``) and run it in the same isolation, with the
same exit codes and streams as typer's runner (``typer.testing.CliRunner.invoke``), which is what they replace.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence

import typer.main
from typer.testing import CliRunner, Result

from trtfarm.cli.main import app

COMMAND = typer.main.get_command(app)


def invoke(args: str | Sequence[str], env: Mapping[str, str | None] | None = None,
           catch_exceptions: bool = True) -> Result:
    """``trtfarm ARGS`` with ``env`` over this process's environment: its exit code, stdout, stderr and the
    exception that escaped it (``SystemExit`` for a non-zero exit, as typer's runner gives it)."""
    runner = CliRunner()
    args = shlex.split(args) if isinstance(args, str) else list(args)
    exc_info, exception, code, value = None, None, 0, None
    with runner.isolation(env=env) as streams:
        try:
            value = COMMAND.main(args=args, prog_name=runner.get_default_prog_name(COMMAND))
        except SystemExit as e:
            exc_info, code = sys.exc_info(), 0 if e.code is None else e.code
            exception = e if code != 0 else None
            if not isinstance(code, int):
                sys.stdout.write(f"{code}\n")
                code = 1
        except Exception as e:
            if not catch_exceptions:
                raise
            exception, code, exc_info = e, 1, sys.exc_info()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr, output = (s.getvalue() for s in streams)
    return Result(runner=runner, stdout_bytes=stdout, stderr_bytes=stderr, output_bytes=output, return_value=value,
                  exit_code=code, exception=exception, exc_info=exc_info)
