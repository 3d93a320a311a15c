"""Store requests per run: what a local build, its up-to-date rerun, a refit run and a farm run ask of the store.

Each scenario runs against a real file:// store wrapped to count every request (tests/store_requests.py), with the
example encoder and TensorRT-RTX builds on this machine's CPU; reports are left out (``report="none"``). Printed per
scenario: requests in all and per method, release pointer and manifest reads, ONNX parses and checks (trtfarm's
``onnxfile.load_model`` and ``check_model``, or ``onnx.load`` and ``onnx.checker.check_model``), ``select_targets``
and ``precision_key`` calls. tests/test_store_requests.py bounds
the same figures.

    python bench/store_requests.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

COLUMNS = ("requests", "get", "size", "list", "list_sizes", "put_if_absent", "compare_and_swap", "upload_file",
           "download_file", "delete", "pointer_reads", "manifest_reads", "onnx_parses", "onnx_checks",
           "select_targets", "precision_key")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from tests.store_requests import scenarios

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        figures = {name: t.figures() for name, t in
                   scenarios(work, lambda name: (work / name / "store").as_uri()).items()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="store requests and repeated work per scenario")
    table.add_column("figure")
    for name in figures:
        table.add_column(name, justify="right")
    for col in COLUMNS:
        row = [f.get(col, f["by_method"].get(col, 0)) for f in figures.values()]
        table.add_row(col, *map(str, row))
    Console().print(table)


if __name__ == "__main__":
    main()
