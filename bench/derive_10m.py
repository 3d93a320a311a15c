"""Derive profiles from a 10-million-record shape log: wall time, records/s and peak memory.

Writes the seed article's two-regime traffic (examples/encoder/make_traffic.py) to a temporary JSONL file, then
runs `trtfarm profiles derive` on it in a fresh process and reads that process's peak RSS and CPU time. With
--check it also reads the log with the line-by-line reader (the reader before the columnar one) and says whether
the two tables are identical.

    python bench/derive_10m.py [--records 10000000] [--check] [--json]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--check", action="store_true", help="compare with the line-by-line reader (slow)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_traffic", REPO / "examples/encoder/make_traffic.py")
    traffic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(traffic)
    say = (lambda *a: None) if args.json else print
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "shapes.jsonl"
        start = time.perf_counter()
        traffic.write_jsonl(log, *traffic.synthetic_traffic(args.records, seed=0))
        mib = log.stat().st_size / 2**20
        say(f"wrote {args.records:,} records ({mib:,.0f} MiB) in {time.perf_counter() - start:.1f} s")
        args_ = ["profiles", "derive", str(log), "--cap", "input_ids:1=512", "--cap", "attention_mask:1=512",
                 "--max-batch", "32", "--out", str(Path(tmp) / "profiles.yaml")]
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", RUN_AND_MEASURE, *args_], capture_output=True, text=True,
                              check=True)
        wall = time.perf_counter() - start
        peak_kib, cpu = proc.stderr.strip().splitlines()[-1].split()
        same = same_tables(log) if args.check else None
    figures = {"records": args.records, "log_mib": round(mib, 1), "wall_s": round(wall, 3),
               "cpu_s": round(float(cpu), 3), "records_per_s": round(args.records / wall),
               "peak_rss_mib": round(int(peak_kib) / 1024), "cpus": os.cpu_count(),
               "load_avg_1m_before": round(load_before, 2), "same_as_line_reader": same}
    if args.json:
        print(json.dumps(figures))
        return
    print(proc.stdout)
    print(f"derive: {wall:.2f} s wall ({float(cpu):.2f} s CPU), {args.records / wall:,.0f} records/s, peak RSS "
          f"{figures['peak_rss_mib']:,} MiB (the process, including Python, NumPy, Arrow and the CLI imports); "
          f"{os.cpu_count()} CPUs, 1-min load average {load_before:.2f} before the run")
    if same is not None:
        print(f"same table as the line-by-line reader: {same}")


if __name__ == "__main__":
    main()
