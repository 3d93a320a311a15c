"""trtfarm's TensorRT code against NVIDIA's own Python bindings of each supported TensorRT version (the API only).

For each version in ``trtfarm.vocabulary.fleet.TENSORRT_BINDINGS``: fetch the bindings wheel from PyPI (cached under
``~/.cache/trtfarm/tensorrt-bindings/``), build a null library for libnvinfer's entry points with ``cc``, import the
real module in a subprocess, and check every TensorRT API use in trtfarm's source against its classes, methods,
properties, enum members and pybind11 signatures. Exits 1 when a use is missing or a call does not bind.
This checks names and signatures, not TensorRT's behaviour: nothing is built or run.

    python bench/tensorrt_api.py [--json] [--apis]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.apicheck.check import check_versions, versions_json  # noqa: E402 - after the repository is on the path


def main() -> int:
    """Run the check and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print {versions: {V: {checked, missing, "
                        "signature_mismatches}}}")
    parser.add_argument("--apis", action="store_true", help="also list each API name checked")
    args = parser.parse_args()
    start = time.perf_counter()
    reports = check_versions()
    wall = time.perf_counter() - start
    if args.json:
        print(json.dumps(versions_json(reports), indent=2))
    else:
        for version, r in reports.items():
            print(f"tensorrt {version}: {r.checked} API names checked, {len(r.missing)} missing, "
                  f"{len(r.signature_mismatches)} signature mismatches")
            for line in r.missing:
                print(f"  missing: {line}")
            for line in r.signature_mismatches:
                print(f"  signature: {line}")
            if args.apis:
                print("  " + ", ".join(r.apis))
        print(f"{wall:.2f} s (names and signatures only: nothing was built or run)")
    return 0 if all(r.ok for r in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
