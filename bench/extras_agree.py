"""Do the extras install together without a downgrade? Each extra resolved alone and all of them together.

    python bench/extras_agree.py [--extras rtx,triton,...] [--json]

pip resolves without installing (``pip install --dry-run --ignore-installed --report``, network to the index): the
checkout's wheel (built once: each resolve of the checkout itself made a build environment of its own) with each
extra alone, then with all the chosen extras at once (the default: every extra ``[all]`` holds).
A package whose version differs between an extra alone and the extras together is one that installing a second
extra into the first one's venv would change (``[triton]`` into ``[rtx]`` downgraded protobuf 7.36 -> 6.33 and
ml_dtypes 0.7 -> 0.5 before the base pinned them). It prints one row per such package and exits 1; none: exit 0.
A resolve takes some 20 s, so this is a bench, not a test of the suite (tests/test_benches.py runs two extras).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ["rtx", "precision", "profiles", "farm", "webhook", "reports", "triton"]  # [all]'s


def wheel(out: Path) -> Path:
    """The checkout's wheel: its metadata is what pip reads of the checkout."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(out)], check=True,
                   stderr=subprocess.DEVNULL)
    return next(out.glob("trtfarm-*.whl"))


def resolve(extras: list[str], whl: Path, folder: Path) -> dict[str, str]:
    """``{package: version}`` that pip would install for the checkout's wheel with ``extras``."""
    report = folder / f"{'+'.join(extras)}.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                    "--report", str(report), f"trtfarm[{','.join(extras)}] @ {whl.as_uri()}"], check=True,
                   stderr=subprocess.DEVNULL)
    found = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in found}


def differences(alone: dict[str, dict[str, str]], together: dict[str, str]) -> list[dict]:
    """One row per (extra, package) whose version alone is not the version together."""
    return [{"extra": extra, "package": name, "alone": version, "together": together.get(name, "absent")}
            for extra, versions in alone.items() for name, version in sorted(versions.items())
            if together.get(name) != version and name != "trtfarm"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default=",".join(EXTRAS), help="comma-separated extras (default: [all]'s)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    extras = args.extras.split(",")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        whl = wheel(Path(tmp))
        futures = {e: pool.submit(resolve, [e], whl, Path(tmp)) for e in extras}
        together = resolve(extras, whl, Path(tmp))
        alone = {e: f.result() for e, f in futures.items()}
    rows = differences(alone, together)
    if args.json:
        print(json.dumps({"extras": extras, "packages_together": len(together), "differences": rows}, indent=2))
    else:
        print(f"{len(extras)} extras, {len(together)} packages together: {len(rows)} differ")
        print("| extra | package | alone | together |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['extra']} | {r['package']} | {r['alone']} | {r['together']} |")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
