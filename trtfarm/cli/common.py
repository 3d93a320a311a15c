"""What every command shares: the app, the consoles, the common options, how a failure is shown, the farm's server."""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer
import typer.core
from rich.console import Console
from rich.markup import escape


class _PlainHelpOption:
    """``--help`` with no type name (typer labels it ``<bool>``)."""

    def get_help_option(self, ctx):  # noqa: D102 (typer's)
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class PlainHelpCommand(_PlainHelpOption, typer.core.TyperCommand):
    """A command whose own ``--help`` shows no type name either."""


class PlainHelpGroup(_PlainHelpOption, typer.core.TyperGroup):
    """A command group whose ``--help`` shows no type name (as ``PlainHelpCommand``)."""


class TrtfarmGroup(PlainHelpGroup):
    """The ``trtfarm`` command: the one place an error trtfarm raised on purpose becomes its line and exit code.

    Every command (and group) runs inside it, so a command never catches a ``TrtfarmError`` only to show it: it lets
    it go, and ``fail`` prints ``error: <one line>`` and exits by the error's kind (2 bad input, 1 a failure or
    mismatch, 3 a service not there). A command catches an error only to say something the error cannot (which
    source a damaged manifest came from).
    """

    def invoke(self, ctx):  # noqa: D102 (click's)
        from trtfarm.errors import TrtfarmError

        try:
            return super().invoke(ctx)
        except TrtfarmError as e:
            raise fail(e) from e


app = typer.Typer(cls=TrtfarmGroup, add_completion=False, no_args_is_help=True,
                  help="Build, validate and publish TensorRT-family plans for every GPU x toolchain in a fleet.")
# No emoji codes: a name such as ``:smile:`` in a model or a path prints as written (and rich's table of codes is
# never imported).
out = Console(emoji=False)
err = Console(stderr=True, emoji=False)

# help text is Rich markup: a literal "[...]" must be escaped ("\\["), or Rich eats it
STORE_OPT = typer.Option(None, "--store", metavar="URI", help="artifact store: a path, file:///abs or "
                         "s3://bucket/prefix \\[default: $TRTFARM_STORE or ./trtfarm-store]")
TARGETS_OPT = typer.Option(None, "--targets-file", metavar="PATH", exists=True, dir_okay=False,
                           help="the fleet's gpu_targets.yaml \\[default: "
                           "$TRTFARM_TARGETS, else ./gpu_targets.yaml, else this machine's built-in fleet]")
JSON_OPT = typer.Option(False, "--json", help="machine-readable output on stdout")
UNCHECKED_MODELOPT_OPT = typer.Option(False, "--unchecked-modelopt", help="run the precision step on a ModelOpt, "
                                      "onnxruntime or Polygraphy other than the versions its workarounds were "
                                      "compared with (refused without it); the step's record and manifest say so")


SERVER_WAIT_OPT = typer.Option(60, "--server-wait", min=0, help="seconds to wait for the Prefect server to answer "
                               "(it needs ~50 s after `prefect server start`)")


def store_uri(store: str | None, *, creates: bool = False, check: bool = True) -> str:
    """``--store``, else ``$TRTFARM_STORE``, else ``trtfarm-store`` under the working directory.

    A local store is checked (``check``): a command that reads one needs its folder; one that ``creates`` it (a
    build, a registration) needs the folder it goes in, so a typo is named instead of read as an empty store or
    created somewhere new. An ``s3://`` store is checked by its first request.
    """
    from trtfarm.errors import UserInputError
    from trtfarm.store import StoreURI, default_store_uri

    uri = store or default_store_uri()
    try:
        where = StoreURI.parse(uri)
    except UserInputError:  # open_store says what is wrong with it
        return uri
    if not check or not where.local:
        return uri
    root = where.path
    source = "--store" if store else "$TRTFARM_STORE" if os.environ.get("TRTFARM_STORE") else "the default store"
    if root.exists() or (creates and root.absolute().parent.is_dir()):
        return uri
    if creates:
        raise UserInputError(f"store {uri} ({source}): the folder it goes in, {root.absolute().parent}, does not "
                             "exist; create that folder first, or fix the path")
    raise UserInputError(f"store {uri} ({source}) does not exist; fix the path, or publish there first "
                         "(`trtfarm build MODEL.onnx --store ...` creates it)")


def store_is_empty(uri: str) -> bool:
    """True when the store holds nothing yet: a local folder not there (or empty), an ``s3://`` prefix with no object.

    A command that writes asks before and after its work: a store it created is named (``note_new_store``), so a
    typo in ``--store`` is seen at once rather than as a second, silent store.
    """
    from trtfarm.store import StoreURI, open_store

    where = StoreURI.parse(uri)
    if where.local:
        return not where.path.is_dir() or next(where.path.iterdir(), None) is None
    return next(iter(open_store(uri).list()), None) is None


def note_new_store(uri: str, was_empty: bool) -> None:
    """``new store: PATH`` on stderr when the store was empty before this command and holds something now."""
    from trtfarm.store import StoreURI

    if was_empty and not store_is_empty(uri):
        where = StoreURI.parse(uri)
        path = where.path.absolute() if where.local else None
        shown = uri if path is None else path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        err.print(message_text(f"new store: {shown}"), highlight=False, soft_wrap=not err.is_terminal)


def targets_path(path: Path | None, *, note: bool = True) -> str:
    """``--targets-file``, else ``$TRTFARM_TARGETS``, else ``gpu_targets.yaml`` here, else the built-in fleet.

    The built-in fleet is said in one line (on stderr, so ``--json`` output stays clean), unless ``note`` is False
    (a command that reads the fleet file only for a setting the environment can give, such as ``sign``'s key).
    """
    from trtfarm.project.fleet_file import BUILTIN_FLEET, default_targets_file

    found = str(path or default_targets_file())
    if found == BUILTIN_FLEET and note:
        err.print(message_text("no gpu_targets.yaml here: using this machine's built-in fleet (its GPUs and "
                               "installed toolchains); `trtfarm init` writes one to edit"), highlight=False,
                  soft_wrap=not err.is_terminal)
    return found


def onnx_not_found(path: Path) -> str:
    """Why ``path`` is no ONNX file to build, and the nearest one: a folder's ``model.onnx``, a sibling's name."""
    from trtfarm.nearest import closest

    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.onnx"))
        if inside:
            pick = "model.onnx" if "model.onnx" in inside else inside[0]
            return f"is a folder, not an ONNX file; build {path / pick}"
        return "is a folder with no .onnx file in it; give the ONNX file's path"
    here = path.parent if path.parent.is_dir() else None
    found = {p.name: p for p in (here.glob("*.onnx") if here else ())}
    found |= {p.name: p / "model.onnx" for p in (here.iterdir() if here else ()) if (p / "model.onnx").is_file()}
    near = closest(path.name, found)
    return f"no such ONNX file; did you mean {found[near]}?" if near else "no such ONNX file"


def output_path(path: Path, flag: str, *, folder: bool = True) -> Path:
    """Check a path the command writes before any work: a folder (``folder``) or a file, made where missing.

    A file where a folder is wanted (or a folder where a file is) is bad input (exit 2); a place that cannot be
    written (read-only, no permission) is ``OutputRefused`` (exit 1). Each is one line naming the path.
    """
    from trtfarm.errors import OutputRefused, UserInputError

    where = f"{flag} {path}" if flag else str(path)
    if path.exists() and folder and not path.is_dir():
        raise UserInputError(f"{where}: is a file, not a folder; give a folder (a missing one is created)")
    if path.is_dir() and not folder:
        raise UserInputError(f"{where}: is a folder; give a file name")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir() and existing != path:
        raise UserInputError(f"{where}: {existing} is a file, not a folder; give a path under a folder")
    writable = existing if existing.is_dir() else existing.parent
    if not os.access(writable, os.W_OK | os.X_OK):
        reason = "a read-only file system" if _read_only(writable) else "no write permission"
        raise OutputRefused(f"{where}: cannot write in {writable} ({reason}); choose a folder you can write to")
    return path


def _read_only(folder: Path) -> bool:
    return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)


def message_text(message: str) -> str:
    """A message as Rich markup: its text escaped (user text is never markup), `code` spans bold, backticks gone."""
    return re.sub(r"`([^`\n]+)`", r"[bold]\1[/bold]", escape(message))


def print_json(doc: object, indent: int | None = 2) -> None:
    """Print ``--json`` output: indented, its strings plain text (``plain_text``: no backticks, no markup)."""
    import json

    from trtfarm.errors import plain_json

    print(json.dumps(plain_json(doc), indent=indent))


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
    err.print(f"[bold red]error:[/] {message_text(text)}", highlight=False, soft_wrap=not err.is_terminal)
    return typer.Exit(code)


def project_root() -> Path:
    """The checkout the flows' entrypoints are relative to (``$TRTFARM_HOME``, else where trtfarm is installed from)."""
    return Path(os.environ.get("TRTFARM_HOME") or Path(__file__).resolve().parents[2])


def need_server(wait_s: float) -> str:
    """The Prefect API URL once its server answers; exit 2 when none is configured, 3 when it does not answer."""
    from trtfarm.extras import require

    require("prefect")  # a base install: one line naming the [farm] extra
    from flows.client import prefect_api_url
    from trtfarm.workers.server import wait_for_server

    api = prefect_api_url()
    if not api:
        raise fail("PREFECT_API_URL is not set: point it at the farm's Prefect server, e.g. "
                   "PREFECT_API_URL=http://127.0.0.1:4200/api (trtfarm never starts an ephemeral one)")
    wait_for_server(api, wait_s, lambda line: err.print(line, highlight=False, soft_wrap=not err.is_terminal))
    return api


def one_line_paragraphs(text: str) -> str:
    """Help text with each paragraph on one line, for Rich to wrap to the terminal.

    A docstring breaks its lines to fit the source's 120 columns; Rich (typer's rich markup mode) keeps each of those
    breaks, so a paragraph printed at 80 columns broke mid-sentence. A paragraph that starts with click's
    keep-my-lines mark (a backspace) is kept as it is; a backticked span is bold (``code_bold``).
    """
    paragraphs = code_bold(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def code_bold(help_text: str) -> str:
    """Help text (Rich markup) with each backticked span bold, as ``message_text`` prints a message's commands."""
    return re.sub(r"``?([^`\n]+)``?", r"[bold]\1[/bold]", help_text)


def plain_metavars(typer_app: typer.Typer) -> None:
    """Give every option and argument a metavar people read (``PROFILE``), never a type name (``<list[str]>``).

    A flag shows none; an option that names its own metavar keeps it. A ``[`` in help text that Rich would read as
    markup is escaped, and each command's help has its paragraphs on one line (``one_line_paragraphs``). Runs over the
    registered commands (and groups) before the app parses anything.
    """
    import inspect

    from typer.models import ArgumentInfo, DefaultPlaceholder, OptionInfo

    for command in typer_app.registered_commands:
        if command.cls in (None, typer.core.TyperCommand):
            command.cls = PlainHelpCommand
        command.help = one_line_paragraphs(command.help or inspect.getdoc(command.callback) or "")
        for name, param in inspect.signature(command.callback).parameters.items():
            info = param.default
            if not isinstance(info, (OptionInfo, ArgumentInfo)):
                continue
            if info.help:  # help text is text: a "[default: ...]" Rich would take for a tag is escaped
                info.help = code_bold(re.sub(r"(?<!\\)\[(?=[a-z#/@])(?!/?bold\])", r"\\[", info.help))
            if info.metavar is None:
                info.metavar = "" if param.annotation in (bool, "bool") else name.upper()
    def plain_group(cls) -> bool:  # typer's default (a placeholder until it builds the group)
        return isinstance(cls, DefaultPlaceholder) or cls in (None, typer.core.TyperGroup)

    if plain_group(typer_app.info.cls):
        typer_app.info.cls = PlainHelpGroup
    for group in typer_app.registered_groups:
        if plain_group(group.cls):
            group.cls = PlainHelpGroup
        plain_metavars(group.typer_instance)
