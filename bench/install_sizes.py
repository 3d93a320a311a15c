"""Each install's size and time: the wheel into a fresh venv per extra, `du -sm` of the venv, pip's wall time.

    python bench/install_sizes.py [--extras base,rtx,...] [--no-deps] [--json]

One row per row of the README's table (every extra, ``all`` and ``test``). pip's cache (or the machine's wheel
folder) is warm here: the times are install times, not downloads. Each row gives the 1-minute load average at its
end (other work on the machine slows the time, not the size) and the size of its venv before the install (pip, as
a fresh venv has it), which its size includes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ["base", "rtx", "precision", "profiles", "farm", "webhook", "reports", "triton", "all", "test"]


def wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(out)], check=True)
    return next(out.glob("trtfarm-*.whl"))


def du_mib(path: Path) -> int:
    """``du -sm``: what the folder takes on disk, in MiB."""
    return int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(whl: Path, extra: str, root: Path, deps: bool = True) -> dict:
    venv = root / f"venv-{extra}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    empty = du_mib(venv)
    spec = str(whl) if extra == "base" else f"trtfarm[{extra}] @ {whl.as_uri()}"
    start = time.perf_counter()
    subprocess.run([str(venv / "bin/pip"), "install", "-q", spec, *([] if deps else ["--no-deps"])], check=True,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    mib = du_mib(venv)
    shutil.rmtree(venv)
    return {"extra": extra, "mib": mib, "install_s": round(wall, 1), "load": round(os.getloadavg()[0], 1),
            "empty_venv_mib": empty}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extras", default=",".join(EXTRAS))
    ap.add_argument("--no-deps", action="store_true", help="the wheel alone, no dependencies (the smallest scale)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trtfarm-sizes-") as tmp:
        whl = wheel(Path(tmp))
        rows = []
        for extra in args.extras.split(","):
            rows.append(measure(whl, extra, Path(tmp), not args.no_deps))
            if not args.json:
                r = rows[-1]
                print(f"{extra:10} {r['mib']:6} MiB {r['install_s']:6.1f} s  (load {r['load']:g}; the empty venv "
                      f"{r['empty_venv_mib']} MiB)", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
