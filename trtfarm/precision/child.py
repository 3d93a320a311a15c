"""The precision step in a Python process of its own, so that nothing it changes in a process outlives it.

ModelOpt's conversion runs with trtfarm's replacements of ModelOpt's and onnxruntime's private functions
(``workarounds``), its unused imports deferred (``deferred``) and glibc's allocator tuned (``heap``): all of that is
the child's, and ends with it. The parent (``trtfarm precision``, a local build, a farm worker) imports no ModelOpt.

``result_in_child(function, ...)`` runs ``python -m trtfarm.precision.child``: the call goes in on its stdin and the
answer comes back on a pipe of its own, both pickled (the child is this program; nothing else writes either). The
answer is the function's result, typed as it returned it, or its exception: the parent raises the same kind with the
same message (``UserInputError`` exits 2, ``GateFailed``, ``ConversionError`` ...), the child's traceback as its
cause. What the child prints goes to the parent's stderr, where its progress bars are drawn when that is a terminal.

Stopping: the child runs in a session of its own, so a Ctrl-C at the terminal reaches the parent only. The parent's
handler (``interrupt.stop``) unwinds it, and on its way out it asks the child to stop (SIGTERM: the child unwinds as
the command line does) and, if it has not within ``STOP_WAIT_S``, ends it. Either way no traceback is printed and
nothing is left: the child's temporary files are in a scratch folder of the parent's (its ``TMPDIR``), removed with
it. A child whose parent died (its stdin ends before it answered) stops itself the same way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from trtfarm import interrupt
from trtfarm.errors import MismatchError
from trtfarm.precision.heap import tuned_environment
from trtfarm.scratch import scratch_dir

T = TypeVar("T")
STOP_WAIT_S = 10.0  # how long a child asked to stop may take to unwind (onnxruntime returns from a run) before it ends


class StepProcessLost(MismatchError):
    """The precision step's process ended without an answer (killed: the kernel's out-of-memory killer, a signal)."""


class ChildTraceback(Exception):
    """The traceback of an exception raised in the child, as text: the cause of the error the parent raises."""


def result_in_child(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` run in a new process (``function`` importable by name); its result or error here.

    Arguments, result and exception must pickle (an exception that does not comes back as a ``RuntimeError`` naming
    its type and message).
    """
    read, write = os.pipe()
    with os.fdopen(read, "rb") as answers, scratch_dir("trtfarm-step-") as tmp:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", __name__, str(write)], stdin=subprocess.PIPE, stdout=2, pass_fds=(write,),
                start_new_session=True, env=_environment(tmp))
        finally:
            os.close(write)
        try:
            _send(child, (function, args, kwargs))
            answer = answers.read()
            code = child.wait()
        except BaseException:  # a stop (Ctrl-C, SIGTERM), or anything else here: the child stops too
            _stop(child)
            raise
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
    return _answered(answer, code)


def _environment(tmp) -> dict[str, str]:
    """The child's environment: the parent's, its temporaries in ``tmp``, its allocator tuned (``heap``).

    ``PYTHONSAFEPATH`` (Python 3.11+): ``-m`` puts no working directory on ``sys.path``, where a user's ``onnx.py``
    would be imported in place of onnx.
    """
    return tuned_environment({**os.environ, "TMPDIR": str(tmp), "PYTHONSAFEPATH": "1"})


def _send(child: subprocess.Popen, call: tuple) -> None:
    """Write the call to the child's stdin (a child that ended before it read it: its exit status says why)."""
    with contextlib.suppress(BrokenPipeError):
        child.stdin.write(pickle.dumps(call, pickle.HIGHEST_PROTOCOL))
        child.stdin.flush()


def _stop(child: subprocess.Popen) -> None:
    """Ask ``child`` to stop, and end it if it has not within ``STOP_WAIT_S``."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _answered(answer: bytes, code: int):
    """The child's result, or its exception raised, or ``StepProcessLost`` when it ended without an answer."""
    if not answer:
        if code in (130, 143):  # stopped by a signal not the parent's (the parent stops it only on its way out)
            raise interrupt.Interrupted(code)
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        hint = (" (SIGKILL is what the kernel's out-of-memory killer sends: give the step less with --max-memory, or "
                "free memory)" if code == -signal.SIGKILL else "; its own message is above")
        raise StepProcessLost(f"the precision step's process {how} before it answered{hint}")
    kind, value, text = pickle.loads(answer)  # noqa: S301 - written by this program's own child, on a private pipe
    if kind == "result":
        return value
    raise value from ChildTraceback(text)


def _portable(err: BaseException) -> BaseException:
    """``err`` if it survives pickling, else a ``RuntimeError`` naming its type and message."""
    try:
        pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes
    except Exception:  # noqa: BLE001 - any failure to round-trip: carried as text
        return RuntimeError(f"{type(err).__module__}.{type(err).__qualname__}: {err}")
    return err


def _stop_when_orphaned() -> None:
    """Stop this process (as SIGTERM does) once its parent is gone: its stdin ends before the answer is written.

    Read from the descriptor, not ``sys.stdin``: a daemon thread blocked in a buffered read holds the buffer's lock,
    which the interpreter's shutdown then cannot take.
    """
    while os.read(0, 4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    """The child: read the call from stdin, run it, write its result or exception to the pipe named in argv."""
    signal.signal(signal.SIGTERM, interrupt.stop)
    os.set_inheritable(int(sys.argv[1]), False)  # a process the step starts must not hold the answer's pipe open
    function, args, kwargs = pickle.load(sys.stdin.buffer)  # noqa: S301 - written by the parent, this program
    threading.Thread(target=_stop_when_orphaned, daemon=True).start()
    try:
        answer = ("result", function(*args, **kwargs), "")
    except interrupt.Interrupted:
        raise  # exits with 128 + the signal, quietly: the parent removes what the step left in its TMPDIR
    except BaseException as err:  # noqa: BLE001 - every other exception goes to the parent, which raises it
        answer = ("error", _portable(err), traceback.format_exc())
    with os.fdopen(int(sys.argv[1]), "wb") as reply:
        reply.write(pickle.dumps(answer, pickle.HIGHEST_PROTOCOL))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the answer is out: the interpreter's teardown (ModelOpt's modules, torch's) would only delay it


if __name__ == "__main__":
    main()
