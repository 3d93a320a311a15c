"""Counts, per process, the calls of ``open_store`` and ``load_fleet`` (the real functions, wrapped), for farm tests.

Active only where ``TRTFARM_COUNT_CALLS`` names a folder and this folder is on ``PYTHONPATH``: it wraps the two
functions in their own modules before anything imports them, so every ``from ... import`` binds the wrapper. Each
call appends a line (the function, its first argument, its callers) to ``<folder>/<flow run id>.calls`` (Prefect
sets ``PREFECT__FLOW_RUN_ID`` in a flow run's process), else ``<folder>/pid-<pid>.calls``; the line is written at
once, so a killed process keeps what it counted.
"""

import os

FOLDER = os.environ.get("TRTFARM_COUNT_CALLS")


def _install(folder: str) -> None:
    import functools

    import trtfarm.project.fleet_file
    import trtfarm.store

    def counted(module, name):
        real = getattr(module, name)

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            import traceback

            who = os.environ.get("PREFECT__FLOW_RUN_ID") or f"pid-{os.getpid()}"
            callers = " < ".join(f.name for f in traceback.extract_stack()[-6:-1])
            with open(os.path.join(folder, f"{who}.calls"), "a") as f:
                f.write(f"{name}\t{args[0] if args else ''}\t{callers}\n")
            return real(*args, **kwargs)

        setattr(module, name, wrapper)

    counted(trtfarm.store, "open_store")
    counted(trtfarm.project.fleet_file, "load_fleet")


if FOLDER:
    _install(FOLDER)
