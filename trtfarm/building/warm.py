"""Warm what a build needs while Prefect's engine starts the run: the S3 client and the toolchain modules.

A farm child is a fresh interpreter. Importing boto3 and building its S3 client costs 0.4 s on an idle 2-core
machine and 1.2-1.6 s on a busy one; importing TensorRT-RTX 0.1-0.3 s. Done on first use they would sit inside the
build task, after the run is Running. ``flows/build_target.py`` calls ``warm_in_background()`` when the engine loads
it, and ``tasks/job.py`` waits for it just before the build opens the store: the work overlaps the engine's own
round trips to the server (read the flow run, propose Running, create the task run). Nothing here can fail a build:
whatever does not warm is done on first use, and a failure there is reported as usual.
"""

from __future__ import annotations

import importlib.util
import threading

from trtfarm.machine.flavour import MODULES, ToolchainUnavailable, import_flavour


def installed_flavours() -> list[str]:
    """The toolchain flavours whose module is installed here (found, not imported)."""
    return [flavour for flavour, module in MODULES.items() if importlib.util.find_spec(module) is not None]


def warm(toolchains: bool = True) -> None:
    """Build the process's S3 client (store/s3_client.py keeps one per process) and import the installed toolchains."""
    from trtfarm.store.s3_client import client_for

    client_for(None)
    for flavour in installed_flavours() if toolchains else ():
        try:
            import_flavour(flavour)
        except ToolchainUnavailable:
            pass  # the build that needs it says why, with the install hint


_WARMING: list[threading.Thread] = []
_HELD: list[bool] = []  # a warm interpreter (flows/warm_engine.py) starts no thread: it forks


def hold(held: bool = True) -> None:
    """Start no warm-up thread until ``hold(False)``: a process that will fork imports the flows without one."""
    _HELD[:] = [True] if held else []


def warm_in_background(toolchains: bool = True) -> None:
    """Start ``warm()`` on a daemon thread (once per process); a build-matrix parent warms the S3 client only."""
    if not _WARMING and not _HELD:
        thread = threading.Thread(target=warm, args=(toolchains,), name="trtfarm-warm", daemon=True)
        thread.start()
        _WARMING.append(thread)


def wait_warm() -> None:
    """Wait for the warm-up, if one started: the build's imports never race it (call before the first store use)."""
    for thread in _WARMING:
        thread.join()
