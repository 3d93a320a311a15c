"""TensorRT's log as trtfarm hears it: filtered by severity inside TensorRT, errors through an IErrorRecorder.

TensorRT's own ``Logger`` drops what is below its ``min_severity`` without calling into Python, so the VERBOSE
messages of a build (ten thousand for a small one) never cross into Python unless asked for
(``trtfarm build --verbose``); the default prints TensorRT's errors only, and those go to the recorder instead.
Both are shared per toolchain module for the life of the process: TensorRT keeps them by pointer.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from types import ModuleType


class Capture:
    """The errors TensorRT recorded while one build (or load, or refit) ran."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder  # attach it: ``builder.error_recorder = log.recorder`` (also runtimes, refitters)
        self.errors: list[str] = []


LOG_SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
_SEVERITY = {"name": "ERROR"}
_LOGGERS: dict[str, object] = {}
_RECORDERS: dict[str, object] = {}
_LOGGERS_LOCK = threading.Lock()


def set_log_severity(name: str) -> None:
    """What TensorRT prints to stderr from now on, in this process: ``ERROR`` (the default) down to ``VERBOSE``."""
    if name not in LOG_SEVERITIES:
        raise ValueError(f"log severity {name!r}: use one of {', '.join(LOG_SEVERITIES)}")
    _SEVERITY["name"] = name


def _shared_logger(trt: ModuleType, builds: bool = True):
    """One TensorRT logger per toolchain module for the life of the process, at the severity asked for.

    TensorRT keeps the first logger it is given process-wide (a later one is ignored); a per-build logger that is
    garbage-collected while the library still holds it hung a later ``Builder()`` here. A process whose first use
    ``builds`` gets TensorRT's own ``Logger``: it drops what is below its ``min_severity`` without calling into Python
    (a build's VERBOSE messages stay in the library). A process that only loads or inspects plans (``verify``,
    ``pull``, a serving host) gets ``_Quiet``: its few messages cross into Python and are kept with the errors, not
    printed over the command's own output (TensorRT prints an internal error it also reports as a failure).
    """
    with _LOGGERS_LOCK:
        logger = _LOGGERS.get(trt.__name__)
        if logger is None:
            logger = _LOGGERS[trt.__name__] = trt.Logger(trt.Logger.ERROR) if builds else _quiet_logger(trt)
        logger.min_severity = _severity(trt, _SEVERITY["name"])
        return logger


def _quiet_logger(trt: ModuleType):
    """A Python ``ILogger`` that keeps TensorRT's messages at or above ``min_severity`` with the running captures.

    It prints them (to stderr) only when more than errors was asked for (``--verbose``).
    """

    class Quiet(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.min_severity = trt.Logger.ERROR

        def log(self, severity, msg) -> None:  # noqa: D102 - TensorRT callback
            if int(severity) > int(self.min_severity):
                return
            if _SEVERITY["name"] not in ("INTERNAL_ERROR", "ERROR"):
                print(f"[TRT] {severity.name}: {msg}", file=sys.stderr)
            recorder = _shared_recorder(trt)
            with recorder.lock:
                for capture in recorder.captures:
                    if msg not in capture.errors:
                        capture.errors.append(msg)

    return Quiet()


def _severity(trt: ModuleType, name: str):
    """``trt.Logger.<name>`` for one of ``LOG_SEVERITIES``."""
    return getattr(trt.Logger, name)


def _shared_recorder(trt: ModuleType):
    """One IErrorRecorder per toolchain module for the life of the process (TensorRT objects hold it by pointer).

    It hands each error to every ``Capture`` registered at the time (the builds, loads and refits running now).
    """
    with _LOGGERS_LOCK:
        if trt.__name__ in _RECORDERS:
            return _RECORDERS[trt.__name__]

        class SharedRecorder(trt.IErrorRecorder):
            def __init__(self) -> None:
                trt.IErrorRecorder.__init__(self)
                self.captures: list[Capture] = []
                self.recent: list[tuple[object, str]] = []
                self.lock = threading.Lock()

            def report_error(self, code, desc) -> bool:  # noqa: D102 - TensorRT callback
                with self.lock:
                    self.recent = [*self.recent[-99:], (code, desc)]
                    for capture in self.captures:
                        capture.errors.append(desc)
                return True  # TensorRT goes on (it does not abort the process)

            def num_errors(self) -> int:  # noqa: D102 - TensorRT callback
                return len(self.recent)

            def get_error_code(self, index):  # noqa: D102 - TensorRT callback (index < num_errors())
                recent = self.recent
                return recent[index][0] if 0 <= index < len(recent) else None

            def get_error_desc(self, index) -> str:  # noqa: D102 - TensorRT callback (index < num_errors())
                recent = self.recent
                return recent[index][1] if 0 <= index < len(recent) else ""

            def has_overflowed(self) -> bool:  # noqa: D102 - TensorRT callback
                return False

            def clear(self) -> None:  # noqa: D102 - TensorRT callback
                with self.lock:
                    self.recent = []

        _RECORDERS[trt.__name__] = SharedRecorder()
        return _RECORDERS[trt.__name__]


@contextmanager
def parser_quiet(trt: ModuleType, logger):
    """While the parser runs, TensorRT prints only internal errors (unless more was asked for)."""
    asked = _SEVERITY["name"]
    if LOG_SEVERITIES.index(asked) > LOG_SEVERITIES.index("ERROR"):
        yield
        return
    logger.min_severity = trt.Logger.INTERNAL_ERROR
    try:
        yield
    finally:
        logger.min_severity = _severity(trt, asked)


@contextmanager
def printed_to_stderr():
    """What TensorRT's ``Logger`` prints goes to the process's stdout: send it to stderr while this block runs.

    The command's own stdout (``--json``) stays clean. TensorRT writes through C's ``stdout``, which a pipe buffers,
    so it is flushed before the descriptor is put back.
    """
    import ctypes

    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no stdout or stderr to speak of (a closed descriptor): leave them as they are
        yield
        return
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def captured_log(trt: ModuleType, builds: bool = True):
    """Yield (logger, capture) for one build, load or refit (``builds=False``: a load or an inspection).

    Pass the logger to TensorRT, set ``capture.recorder`` as each object's ``error_recorder``, and read what
    TensorRT recorded from ``capture.errors``.
    """
    logger, recorder = _shared_logger(trt, builds), _shared_recorder(trt)
    capture = Capture(recorder)
    with recorder.lock:
        recorder.captures.append(capture)
    try:
        yield logger, capture
    finally:
        with recorder.lock:
            recorder.captures.remove(capture)
