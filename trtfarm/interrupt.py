"""Stopping cleanly on SIGTERM/SIGINT: temporary files and folders are removed and nothing is half-published.

The command line's signal handler calls ``stop``: it raises ``Interrupted`` (a ``SystemExit``, so no ``except
Exception`` swallows it and every ``finally`` runs). A signal that lands while the builder is in C++ code reaches
Python inside a TensorRT callback, where the exception is lost: so ``stop`` also sets a flag that makes the progress
monitor cancel the build, and ``check`` raises once the builder returns. The exception can land anywhere, even in
the ``finally`` that removes a temporary: ``trtfarm.scratch`` records every temporary before it exists, and the
command line removes what is left (``scratch.remove_all``) on its way out.

A farm child runs inside Prefect's engine, which owns the process's SIGTERM handler; ``stopping_on`` lends the
signal to ``stop`` around the build, so a termination notice cancels the build the same way there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOP = threading.Event()
_CODE = [143]  # the exit status of the stop requested (128 + its signal)
_DEFERRED = [0]  # > 0 while C++ code that calls back into Python runs: a stop then only sets STOP
_LEFT: list[str] = []  # what a stop unwound, innermost first
_DONE: list[str] = []  # what it finished (published), for the same line


class Interrupted(SystemExit):
    """The process was asked to stop; exits with 128 + the signal number."""


def stop(signum: int, frame=None) -> None:
    """Signal handler: remember the request and unwind the stack, once (a second signal would break the unwinding)."""
    if STOP.is_set():
        return
    _CODE[0] = 128 + signum
    STOP.set()
    if not _DEFERRED[0]:
        raise Interrupted(_CODE[0])


def check() -> None:
    """Raise ``Interrupted`` when a stop was requested while Python could not be interrupted."""
    if STOP.is_set():
        raise Interrupted(_CODE[0])


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Within the block, a stop says ``what`` was left unfinished (``stopped_line``)."""
    try:
        yield
    except Interrupted:
        _LEFT.append(what)  # the innermost block the stop unwound through comes first
        raise


def finished(what: str) -> None:
    """Record something finished and published, for the line a stop prints."""
    _DONE.append(what)


def stopped_line(code: int) -> str:
    """The one line a stopped command prints: what it left unfinished (never published) and what it had finished."""
    how = {130: "Ctrl-C", 143: "SIGTERM"}.get(code, f"signal {code - 128}")
    left = f"{_LEFT[0]} was left unfinished, not published or released" if _LEFT else \
        "nothing more was published"
    done = f"; finished before: {len(_DONE)} ({', '.join(_DONE[:3])}{', ...' if len(_DONE) > 3 else ''})" \
        if _DONE else ""
    return f"stopped ({how}): {left}{done}; temporary files removed; the same command again finishes the rest"


@contextmanager
def deferred() -> Iterator[None]:
    """Run C++ code that calls back into Python (TensorRT's builder, parser, logger) with stops deferred.

    A stop requested inside only sets ``STOP`` (an exception raised in a callback would be printed and lost); the
    progress monitor then cancels the build, and the stop is raised when the block ends, even over an error.
    """
    _DEFERRED[0] += 1
    try:
        yield
    finally:
        _DEFERRED[0] -= 1
        check()


@contextmanager
def stopping_on(signum: int) -> Iterator[None]:
    """Within the block, ``signum`` stops the work as on the command line (``stop``); the old handler is back after.

    Only from the main thread (Python delivers signals there).
    """
    previous = signal.signal(signum, stop)
    try:
        yield
    finally:
        signal.signal(signum, previous)
