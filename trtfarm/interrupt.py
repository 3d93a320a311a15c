"""Stopping cleanly on SIGTERM/SIGINT: temporary files and folders are removed and nothing is half-published.

The command line's signal handler calls ``stop``: it raises ``Interrupted`` (a ``SystemExit``, so no ``except
Exception`` swallows it and every ``finally`` runs). A signal that lands while the builder is in C++ code reaches
Python inside a TensorRT callback, where the exception is lost: so ``stop`` also sets a flag that makes the progress
monitor cancel the build, and ``check`` raises once the builder returns.
"""

from __future__ import annotations

import threading

STOP = threading.Event()


class Interrupted(SystemExit):
    """The process was asked to stop; exits with 128 + the signal number."""


def stop(signum: int, frame=None) -> None:
    """Signal handler: remember the request and unwind the stack."""
    STOP.set()
    raise Interrupted(128 + signum)


def check() -> None:
    """Raise ``Interrupted`` when a stop was requested while Python could not be interrupted."""
    if STOP.is_set():
        raise Interrupted(143)
