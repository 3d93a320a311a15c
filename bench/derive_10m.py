"""Derive profiles from shape logs of 1M, 5M and 10M records: wall time, records/s and peak memory per log size.

Writes the seed article's two-regime traffic (examples/encoder/make_traffic.py) to a temporary JSONL file per size,
then runs `trtfarm profiles derive` on it in a fresh process and reads that process's peak RSS and CPU time. The goal:
peak RSS under 200 MiB for every size, and within 30 MiB across the sizes (memory holds a block of the log and its
distinct lines, not its records). With --check it also reads each log with the line-by-line reader (the reader before
the columnar one) and says whether the two tables are identical.

    python bench/derive_10m.py [--records 1000000,5000000,10000000] [--check] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_PEAK_MIB, GOAL_SPREAD_MIB = 200, 30
# Runs the CLI, then prints VmHWM (peak RSS of this address space; ru_maxrss would include the forking parent's)
# and the process's CPU seconds.
RUN_AND_MEASURE = """
import os, sys
sys.argv = ["trtfarm", *sys.argv[1:]]
from trtfarm.cli.main import app
try:
    app()
except SystemExit:
    pass
t = os.times()
peak = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(peak, t.user + t.system, file=sys.stderr)
"""


def same_tables(log: Path) -> bool:
    """The columnar reader's table equals the line-by-line reader's (columns, rows, counts)."""
    import numpy as np

    from trtfarm.profiles.shapelog import read_columnar, read_line_by_line

    a, b = read_columnar(log), read_line_by_line(log)
    return a is not None and a.columns == b.columns and np.array_equal(a.rows, b.rows) and \
        np.array_equal(a.counts, b.counts)


def derive(traffic, records: int, tmp: Path, check: bool, say) -> dict:
    """Write a log of ``records`` records, derive its profiles in a fresh process, measure it."""
    log = tmp / f"shapes-{records}.jsonl"
    start = time.perf_counter()
    traffic.write_jsonl(log, *traffic.synthetic_traffic(records, seed=0))
    mib = log.stat().st_size / 2**20
    say(f"wrote {records:,} records ({mib:,.0f} MiB) in {time.perf_counter() - start:.1f} s")
    args = ["profiles", "derive", str(log), "--cap", "input_ids:1=512", "--cap", "attention_mask:1=512",
            "--max-batch", "32", "--json"]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN_AND_MEASURE, *args], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    peak_kib, cpu = proc.stderr.strip().splitlines()[-1].split()
    same = same_tables(log) if check else None
    log.unlink()
    return {"records": records, "log_mib": round(mib, 1), "wall_s": round(wall, 3), "cpu_s": round(float(cpu), 3),
            "records_per_s": round(records / wall), "peak_rss_mib": round(int(peak_kib) / 1024),
            "load_avg_1m_before": round(load_before, 2), "profiles": len(json.loads(proc.stdout)["profiles"]),
            "same_as_line_reader": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="1000000,5000000,10000000", help="log sizes, comma-separated")
    ap.add_argument("--check", action="store_true", help="compare with the line-by-line reader (slow)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_traffic", REPO / "examples/encoder/make_traffic.py")
    traffic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(traffic)
    say = (lambda *a: None) if args.json else print
    with tempfile.TemporaryDirectory() as tmp:
        rows = [derive(traffic, int(n), Path(tmp), args.check, say) for n in args.records.split(",")]
    peaks = [r["peak_rss_mib"] for r in rows]
    spread = max(peaks) - min(peaks)
    doc = {"cpus": os.cpu_count(), "sizes": rows, "peak_rss_spread_mib": spread,
           "goal_met": max(peaks) < GOAL_PEAK_MIB and spread <= GOAL_SPREAD_MIB}
    if args.json:
        print(json.dumps(doc))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"trtfarm profiles derive, fresh process per log ({os.cpu_count()} CPUs)")
    for col in ("records", "log MiB", "wall s", "CPU s", "records/s", "peak RSS MiB", "load before"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['records']:,}", f"{r['log_mib']:,.0f}", f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}",
                      f"{r['records_per_s']:,}", str(r["peak_rss_mib"]), f"{r['load_avg_1m_before']:.1f}")
    Console().print(table)
    print(f"peak RSS {min(peaks)}-{max(peaks)} MiB (spread {spread} MiB; the process, including Python, NumPy, Arrow "
          f"and the CLI imports); goal < {GOAL_PEAK_MIB} MiB, spread <= {GOAL_SPREAD_MIB} MiB: "
          f"{'met' if doc['goal_met'] else 'NOT met'}")
    if args.check:
        print(f"same table as the line-by-line reader: {all(r['same_as_line_reader'] for r in rows)}")


if __name__ == "__main__":
    main()
