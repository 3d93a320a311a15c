"""The open-world conformance bench: every model of every generated family through every step, per-family totals.

Runs tests/corpus/openworld.py (the code the suite's sample runs) on every model of every family of
tests/corpus/families.py, one process per family: the plain TensorRT-RTX builder (the referee of build), `trtfarm
build`, its rerun, `verify`, a weight change, onnxruntime on the FP32 model (the referee of precision), and
`trtfarm precision` fp16 and int8; a failed gate's suggested `--auto-pin` command, run as a user pastes it; and, once
per family, the fp16 step as a real process (nothing may follow its result). Prints one row per family (models; the
plain builder's builds; how many builds agree with it; refusals carrying the builder's reason; models onnxruntime
runs; fp16 and int8 verdicts: passed / failed / not judged / refused; int8 failures that auto-pin resolved with a
passing FP32 pin set / that it said no pin set passes; tracebacks; models judged wrong), the date and the machine.
--markdown prints docs/conformance.md's table; --json every cell. The hand-written matrix of tests/corpus/matrix.py
is bench/conformance_matrix.py.

    python bench/conformance.py [--families NAME,...] [--share N] [--names MODEL,...]
                                [--save FILE | --from FILE]
                                [--markdown | --json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.corpus.families import FAMILIES  # noqa: E402

COLUMNS = ("family", "models", "plain built", "agree", "refused, builder's reason", "ort runs", "fp16 p/f/n/r",
           "int8 p/f/n/r", "int8 auto-pin pass/none", "tracebacks", "wrong")
VERDICTS = ("passed", "failed", "not judged", "refused")


def machine() -> str:
    """CPU model, core count and Python, for the table's caption."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_family(family: str, share: int, work: str, save: Path | None, names: str = "") -> list[dict]:
    """One process for the family (a crash loses that family's rest, and says so); each model's line is saved
    to ``save`` as it comes, so a run cut short still has what it measured (``--from`` renders it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.corpus.openworld", family, "--share", str(share), "--work",
                             work, "--names", names], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    rows = []
    for line in proc.stdout:
        if line.startswith("{"):
            rows.append({**json.loads(line), "load": round(os.getloadavg()[0], 1)})  # the machine's, as it ended
            if save is not None:
                with open(save, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    err = proc.stderr.read()
    if proc.wait():
        rows.append({"family": family, "model": "(process)", "cells": {}, "seconds": 0,
                     "wrong": [f"the family's process exited {proc.returncode}: {err[-400:]}"]})
    return rows


def totals(rows: list[dict]) -> dict:
    """The family's row of the table."""
    t = Counter()
    for r in rows:
        c = {s: v["outcome"] for s, v in r["cells"].items()}
        if not c:
            t["wrong"] += 1
            continue
        t["models"] += 1
        t["plain built"] += c.get("plain") == "built"
        agree = (c.get("plain") == "built") == (c.get("build") == "built")
        t["agree"] += agree
        t["refused, builder's reason"] += agree and c.get("plain") != "built" and not any(
            w.startswith("build refused without") for w in r["wrong"])
        t["ort runs"] += c.get("ort") == "runs"
        for mode in ("fp16", "int8"):
            t[f"{mode} {c.get(mode)}"] += 1
        t[f"int8 pin {(r['cells'].get('int8', {}).get('pin') or {}).get('outcome')}"] += 1
        t["tracebacks"] += any(v.get("traceback") or (v.get("pin") or {}).get("traceback")
                               for s, v in r["cells"].items() if s != "plain")
        t["wrong"] += bool(r["wrong"])
    return {"models": t["models"], "plain built": t["plain built"], "agree": t["agree"],
            "refused, builder's reason": t["refused, builder's reason"], "ort runs": t["ort runs"],
            **{f"{m} p/f/n/r": "/".join(str(t[f"{m} {v}"]) for v in VERDICTS) for m in ("fp16", "int8")},
            "int8 auto-pin pass/none": f"{t['int8 pin passed']}/{t['int8 pin no pin set']}",
            "tracebacks": t["tracebacks"], "wrong": t["wrong"]}


def column_sum(values: list) -> str | int:
    """A column's total: a sum, or a sum of each part of ``a/b/c`` figures."""
    if all(isinstance(v, int) for v in values):
        return sum(values)
    return "/".join(str(sum(parts)) for parts in zip(*([int(x) for x in v.split("/")] for v in values), strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="", help="comma-separated families (default: every family)")
    parser.add_argument("--share", type=int, default=1, help="run 1/N of each family (default: all)")
    parser.add_argument("--names", default="", help="comma-separated models of the families (default: every one)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="docs/conformance.md's table")
    parser.add_argument("--save", type=Path, help="append each model's JSON line to this file as it is measured")
    parser.add_argument("--from", dest="source", type=Path, help="render the table from a --save file")
    args = parser.parse_args()
    families = [f for f in FAMILIES if not args.families or f in args.families.split(",")]
    by_family, start = {}, time.perf_counter()
    if args.source:
        for line in args.source.read_text().splitlines():
            row = json.loads(line)
            by_family.setdefault(row["family"], []).append(row)
        by_family = {f: by_family[f] for f in FAMILIES if f in by_family}
        seconds = sum(r["seconds"] for rows in by_family.values() for r in rows)
        stamp = datetime.fromtimestamp(args.source.stat().st_mtime, timezone.utc)
    else:
        with tempfile.TemporaryDirectory(prefix="trtfarm-conformance-") as work:
            for i, family in enumerate(families, 1):
                t = time.perf_counter()
                by_family[family] = run_family(family, args.share, work, args.save, args.names)
                print(f"[{i}/{len(families)}] {family}: {len(by_family[family])} models, "
                      f"{time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        seconds, stamp = time.perf_counter() - start, datetime.now(timezone.utc)
    loads = [r["load"] for rows in by_family.values() for r in rows if "load" in r]
    when = (f"{stamp:%Y-%m-%d %H:%M} UTC on {machine()}, {seconds:.0f} s"
            + (f", load {min(loads):.0f}-{max(loads):.0f}" if loads else "")
            + (f", 1/{args.share} of each family" if args.share > 1 else ""))
    table = {f: totals(rows) for f, rows in by_family.items()}
    wrong = sum(t["wrong"] for t in table.values())
    if args.json:
        print(json.dumps({"when": when, "families": table, "models": by_family}, indent=2))
    elif args.markdown:
        print(f"| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
        for family, t in table.items():
            print(f"| {family} | {' | '.join(str(t[c]) for c in COLUMNS[1:])} |")
        total = {c: column_sum([t[c] for t in table.values()]) for c in COLUMNS[1:]}
        print(f"| all | {' | '.join(str(total[c]) for c in COLUMNS[1:])} |")
        print(f"\n{sum(t['models'] for t in table.values())} models, {wrong} judged wrong; {when}.")
    else:
        from rich.console import Console
        from rich.table import Table

        out = Table(title=f"open-world conformance: {when}")
        for col in COLUMNS:
            out.add_column(col, overflow="fold")
        for family, t in table.items():
            out.add_row(family, *(str(t[c]) for c in COLUMNS[1:]))
        Console().print(out)
        for rows in by_family.values():
            for r in rows:
                for w in r["wrong"]:
                    print(f"{r['family']}/{r['model']}: {w}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
