"""Derive profiles from a 10-million-record shape log: records/s and peak memory.

Writes the seed article's two-regime traffic (examples/encoder/make_traffic.py) to a temporary JSONL file, then
runs `trtfarm profiles derive` on it in a fresh process and reads that process's peak RSS.

    python bench/derive_10m.py [--records 10000000]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Runs the CLI, then prints VmHWM (peak RSS of this address space; ru_maxrss would include the forking parent's).
RUN_AND_MEASURE = """
import sys
sys.argv = ["trtfarm", *sys.argv[1:]]
from trtfarm.cli.main import app
try:
    app()
except SystemExit:
    pass
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")), file=sys.stderr)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_traffic", REPO / "examples/encoder/make_traffic.py")
    traffic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(traffic)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "shapes.jsonl"
        start = time.perf_counter()
        traffic.write_jsonl(log, *traffic.synthetic_traffic(args.records, seed=0))
        print(f"wrote {args.records:,} records ({log.stat().st_size / 2**20:,.0f} MiB) in "
              f"{time.perf_counter() - start:.1f} s")
        args_ = ["profiles", "derive", str(log), "--cap", "input_ids:1=512", "--cap", "attention_mask:1=512",
                 "--max-batch", "32", "--out", str(Path(tmp) / "profiles.yaml")]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", RUN_AND_MEASURE, *args_], capture_output=True, text=True,
                              check=True)
        wall = time.perf_counter() - start
        peak_mib = int(proc.stderr.strip().splitlines()[-1]) / 1024
    print(proc.stdout)
    print(f"derive: {wall:.1f} s wall, {args.records / wall:,.0f} records/s, peak RSS {peak_mib:,.0f} MiB "
          f"(the process, including Python, NumPy and onnx imports)")


if __name__ == "__main__":
    main()
