"""The conformance matrix: which real third-party exports build and pass which gates, and how long each step took.

Runs tests/corpus/matrix.py's rows (ONNX files from pinned PyPI wheels, and exports made here by torch.onnx from
random-initialised transformers models) through every step a user runs: the plain TensorRT-RTX builder (the
referee), the profile pre-check, `trtfarm build` and its rerun, `trtfarm verify`, and `trtfarm precision` fp16 and
int8. Prints a table (outcome and seconds per cell, with whether it matches the row's expectation) and, with
--markdown, docs/conformance.md's table; --json prints every cell.

    python bench/conformance_matrix.py [--rows NAME,...] [--steps STEP,...] [--json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.corpus.matrix import ROWS, STEPS, run_row  # noqa: E402

SHORT = {"built": "built", "up-to-date": "up to date", "passed": "passed", "ok": "ok", "refused": "refused",
         "failed": "failed", "-": "–"}


def machine() -> str:
    """CPU model, core count and Python, for the table's caption."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="comma-separated row names (default: every row)")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated steps (default: every step)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="docs/conformance.md's table")
    args = parser.parse_args()
    steps = tuple(args.steps.split(","))
    if set(steps) - set(STEPS):
        parser.error(f"unknown step(s) {', '.join(sorted(set(steps) - set(STEPS)))}; the steps: {', '.join(STEPS)}")
    wanted = [r for r in ROWS if not args.rows or r.name in args.rows.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="trtfarm-conformance-") as tmp:
        for i, row in enumerate(wanted, 1):
            start = time.perf_counter()
            cells = run_row(row, Path(tmp), steps)
            results[row.name] = (row, cells)
            print(f"[{i}/{len(wanted)}] {row.name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    when = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}"
    mismatches = sum(not c.matches(row.expect[s]) for row, cells in results.values() for s, c in cells.items())
    if args.json:
        print(json.dumps({"when": when, "mismatches": mismatches, "rows": {
            name: {"source": row.source, "profile": row.profile,
                   "cells": {s: {**c.to_json(), "expected": row.expect[s], "matches": c.matches(row.expect[s])}
                             for s, c in cells.items()}} for name, (row, cells) in results.items()}}, indent=2))
    elif args.markdown:
        print(f"| model | made by | {' | '.join(steps)} |")
        print(f"|---|---|{'---|' * len(steps)}")
        for name, (row, cells) in results.items():
            cols = [f"{SHORT.get(c.outcome, c.outcome)}" + (f" {c.seconds:.1f} s" if c.outcome != "-" else "")
                    + ("" if c.matches(row.expect[s]) else " (unexpected)") for s, c in cells.items()]
            print(f"| {name} | {row.source} | {' | '.join(cols)} |")
        print(f"\n{len(results)} models x {len(steps)} steps, {mismatches} cells off their expectation; {when}.")
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"conformance: {when}")
        for col in ("model", *steps):
            table.add_column(col, overflow="fold")
        for name, (row, cells) in results.items():
            table.add_row(name, *(f"{SHORT.get(c.outcome, c.outcome)} {c.seconds:.1f}s"
                                  + ("" if c.matches(row.expect[s]) else " [red]≠[/]") for s, c in cells.items()))
        Console().print(table)
        print(f"{mismatches} cells off their expectation")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
