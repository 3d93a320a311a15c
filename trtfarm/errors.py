"""The three kinds of error, as users and the retry policy see them.

- ``UserInputError``: what the user gave us (a model, a file, a flag, a profile) is wrong. The message names the
  problem and the fix; the command exits 2 with that one line; a build records the target as failed; never retried.
- ``InfrastructureError``: a service we depend on failed (the store, the Prefect server, Docker). Retried by the
  flows' tasks; the command line prints one line naming the service and exits 1, or 3 when the service is not there
  at all (``StoreUnavailable``, ``ServerUnavailable``, ``DockerUnavailable``: no answer within its timeouts).
- ``MismatchError``: neither the input nor a service is at fault, but what trtfarm found is not what it should be
  (a damaged store object, a refused signature, a plan for another TensorRT) or an action cannot happen here (a
  refit without a GPU, a folder that refuses the write). One line, exit 1; never retried (the same bytes give the
  same answer).
- Anything else is a bug in trtfarm: it propagates with its traceback (exit 1). Nothing catches ``Exception`` to turn
  a bug into a message.

Every error class trtfarm defines derives from one of the three; docs/architecture.md lists each with its kind and
exit code (tests/architecture/test_docs_match.py holds the list to the code).
"""

from __future__ import annotations

import re
from html import escape


class TrtfarmError(Exception):
    """Base class for every error trtfarm raises on purpose; ``exit_code`` is what the command line exits with."""

    exit_code = 1


class UserInputError(TrtfarmError):
    """Bad input: the message names the problem and how to fix it. Retrying does not help."""

    exit_code = 2


class ConfigError(UserInputError):
    """A configuration file (gpu_targets.yaml, farm.yaml, a profiles file) is malformed."""


class InvalidModel(UserInputError):
    """The file is no valid ONNX model (it does not parse, or ``onnx.checker`` refuses it): the model as a whole.

    A local build runs onnx.checker beside its TensorRT build: this refusal then stops the command as planning's
    would (exit 2, nothing published), where a build's own failure fails only its targets.
    """


def invalid_model(path: object, err: BaseException) -> InvalidModel:
    """One line for a file that is no valid ONNX model: the reader's or the checker's words, and the fix."""
    first = first_line(err)
    return InvalidModel(f"{path}: not a valid ONNX model ({type(err).__name__}: {first}). Fix: re-export the model; "
                        "check the file was copied completely.")


class InfrastructureError(TrtfarmError):
    """A service trtfarm depends on failed; retrying may help. ``service`` names it for the one-line message."""

    service = "a service"


class StoreError(InfrastructureError):
    """The artifact store refused or failed an operation."""

    service = "the artifact store"


class IntegrityError(StoreError):
    """Stored bytes do not match the sha256 recorded for them."""


class StoreUnavailable(StoreError):
    """The store's endpoint did not answer (connect or read timeout, connection refused) within the retry budget."""

    exit_code = 3


class ScratchSpaceError(InfrastructureError):
    """A local scratch folder (``TMPDIR``, a build's work folder) could not be written: full, read-only, missing."""

    service = "local scratch space"


def scratch_failure(err: OSError, what: str, where: object = None) -> ScratchSpaceError:
    """One line for an ``OSError`` writing scratch files: what, where, the OS reason, and the fix."""
    return ScratchSpaceError(f"cannot write {what} in {err.filename or where}: {err.strerror or err}; free space "
                             "there or point TMPDIR at a disk with room, then run again")


class MismatchError(TrtfarmError):
    """A mismatch or failure: what trtfarm found is not what it should be, or an action cannot happen here. Exit 1.

    ``prefix`` is put before the message on the command line (``refused`` for a signature), as ``service`` is for an
    infrastructure failure.
    """

    prefix = ""


class OutputRefused(MismatchError):
    """A local file or folder the command writes refused the write: read-only, no permission, full.

    ``--repo``, ``--out``, ``--to``, ``init DIR``; exit 1, like a store that refuses a write.
    """


class CorruptObject(MismatchError):
    """A store object trtfarm wrote is not what it should be (not JSON, fields missing); the message names the key.

    Not retried (reading it again gives the same bytes); the command line exits 1.
    """


def one_line(err: TrtfarmError) -> str:
    """The message a person sees: the error's text, prefixed by the service for infrastructure failures.

    A mismatch with a ``prefix`` (a refused signature) says it first: ``refused: untrusted key: ...``.
    """
    text = str(err).strip() or type(err).__name__
    if isinstance(err, InfrastructureError) and err.service not in text:
        return f"{err.service}: {text}"
    if isinstance(err, MismatchError) and err.prefix:
        return f"{err.prefix}: {text}"
    return text


def first_line(err: Exception) -> str:
    """The first line of an exception's text (a library's multi-line message), else its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# The libraries trtfarm drives whose failures it translates at their adapter, by top-level package
LIBRARIES = {"modelopt": "ModelOpt", "onnxruntime": "onnxruntime", "polygraphy": "Polygraphy", "onnx": "onnx",
             "onnx_graphsurgeon": "ONNX-GraphSurgeon", "onnxslim": "onnxslim", "onnxconverter_common":
             "onnxconverter-common", "onnxscript": "onnxscript", "numpy": "numpy", "torch": "torch"}


def _library_of(filename: str) -> tuple[str, str] | None:
    path = filename.replace("\\", "/")
    if "/site-packages/" not in path and "/dist-packages/" not in path:
        return None
    rel = path.split("-packages/", 1)[1]
    top = rel.split("/", 1)[0]
    return (LIBRARIES[top], rel) if top in LIBRARIES else None


def library_failure(err: BaseException) -> tuple[str, str] | None:
    """Which library's code raised ``err``: (the library trtfarm called, ``file.py:line`` where it raised), or None.

    The raising frame is the innermost Python frame of the traceback (a C++ extension's error surfaces in the
    Python code that called it); it must be in one of ``LIBRARIES``. The library named is the first one the stack
    entered (ModelOpt, when ModelOpt's call of onnx.checker raised). An error raised in trtfarm's own code, or
    anywhere else, gives None: a bug keeps its traceback. Adapters use this to turn what a library raises (ModelOpt's
    bare ``Exception`` included) into one line naming that library, and nothing else.
    """
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    raised = _library_of(frames[-1].filename) if frames else None
    if raised is None:
        return None
    entered = next(found for f in frames if (found := _library_of(f.filename)) is not None)
    return entered[0], f"{raised[1]}:{frames[-1].lineno}"


_MARKUP = re.compile(r"\[/?(?:bold|dim|italic|underline|red|green|yellow|blue|cyan|magenta)(?: [a-z]+)*\]|\[/\]")


def plain_text(message: str) -> str:
    """A message for machines and pages: no backticks around `commands`, no Rich markup (``[bold]``, ``[/]``).

    Messages are written for the terminal (the command line makes a backticked span bold); ``--json`` and the HTML
    pages carry this plain text instead, through ``plain_json`` and the pages' ``html_text``.
    """
    return _MARKUP.sub("", message).replace("`", "")


def plain_json(doc: object) -> object:
    """``doc`` (JSON-ready: dicts, lists, strings, numbers) with every string, keys too, made ``plain_text``."""
    if isinstance(doc, str):
        return plain_text(doc)
    if isinstance(doc, dict):
        return {plain_json(k): plain_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [plain_json(v) for v in doc]
    return doc


def html_text(message: str) -> str:
    """A message as HTML text: escaped, a backticked span a ``<code>`` element, no markup (see ``plain_text``)."""
    spans = _MARKUP.sub("", message).split("`")
    if len(spans) % 2 == 0:  # an unpaired backtick is no code span
        return escape(plain_text(message))
    return "".join(f"<code>{escape(s)}</code>" if i % 2 else escape(s) for i, s in enumerate(spans))
