"""Trace one request through trtfarm's modules: which modules it passes through and the calls between them, counted.

Runs a `trtfarm` command in this process under `sys.setprofile` and records every call from a function of one trtfarm
module (or `flows`/`tasks`) to a function of another. A call is counted once per (caller function, callee function)
pair, however often it happens. "Across layers" are the calls between two units of tests/architecture's LEVELS
(`trtfarm.state` and `trtfarm.planning` are two units); the last table counts those by pair of units.

    python tools/request_trace.py [--chdir DIR] [--json] -- status --store file:///tmp/s --targets-file f.yaml

docs/architecture.md ("One status request, traced") gives its figures for a `status` and a farm run's planning.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections import Counter

OURS = ("trtfarm", "flows", "tasks")


def unit_of(module: str) -> str:
    """``trtfarm.state.views`` -> ``state``; ``trtfarm.layout`` -> ``layout``; ``flows.x`` -> ``flows``."""
    parts = module.split(".")
    return parts[0] if parts[0] != "trtfarm" else (parts[1] if len(parts) > 1 else "trtfarm")


def trace(argv: list[str]) -> set[tuple[str, str, str, str]]:
    """The distinct (caller module, caller function, callee module, callee function) calls between our modules."""
    from trtfarm.cli.main import main

    calls: set[tuple[str, str, str, str]] = set()

    def profile(frame, event, _arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller_frame = frame.f_back
        if caller_frame is None or not callee.startswith(OURS):
            return
        caller = caller_frame.f_globals.get("__name__", "")
        if caller.startswith(OURS) and caller != callee and not callee.startswith("trtfarm.cli"):
            calls.add((caller, caller_frame.f_code.co_qualname, callee, frame.f_code.co_qualname))

    sys.argv = ["trtfarm", *argv]
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main()
    finally:
        sys.setprofile(None)
    return calls


def figures(calls: set[tuple[str, str, str, str]]) -> dict:
    """The counts of ``calls``: modules, calls between modules, those across units, and those by pair of units."""
    modules = sorted({c[0] for c in calls} | {c[2] for c in calls})
    across = [c for c in calls if unit_of(c[0]) != unit_of(c[2])]
    pairs = Counter(f"{unit_of(c[0])} -> {unit_of(c[2])}" for c in across)
    return {"modules": len(modules), "calls_between_modules": len(calls), "across_layers": len(across),
            "by_pair": dict(pairs.most_common()), "module_list": modules}


def main() -> None:
    """Trace the command after ``--`` and print its counts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chdir", help="run the command in this folder")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the trtfarm command line")
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.chdir:
        os.chdir(args.chdir)
    found = figures(trace(argv))
    if args.json:
        print(json.dumps(found, indent=1))
        return
    print(f"trtfarm {' '.join(argv)[:60]}")
    print(f"  modules passed through  {found['modules']:>4}")
    print(f"  calls between modules   {found['calls_between_modules']:>4}")
    print(f"  of them across layers   {found['across_layers']:>4}")
    for pair, n in found["by_pair"].items():
        print(f"    {pair:<40} {n:>4}")


if __name__ == "__main__":
    main()
