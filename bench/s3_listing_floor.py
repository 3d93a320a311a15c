"""What listing a fleet-sized store costs on moto's S3 server: the floor under a cold `status` there (issue 46).

A view lists every object of the store to know each model's state record is current (StoreSurvey,
trtfarm/state/record.py), so its wall time on S3 is at least this listing's. Issue 46's goal: a cold
`status` on moto's S3 server in at most 5 s of wall at load 2 or less.

Setup (not timed): moto's S3 server as its own process (bench/_moto.py), its bucket filled in that process before
it listens (``python -m bench._moto --fill``: 64,000 PUTs over HTTP would take about 5 minutes), with the keys of
the real layout (trtfarm.layout) and 16-byte bodies: for MODELS models x the 20 targets of bench/fleet_views.py, an
export record and farm.yaml, each target's plan, manifest and release pointer, a run's outcomes and the model's state
record (64 objects); one model in 20 has a newer export and a second run (3 more). 1,000 models: 64,150 objects.

Timed, each once, in this process: (a) trtfarm's S3 store listing the whole store (``list_versions``) and (b)
StoreSurvey's own listings (its prefixes side by side in threads, as `status` lists them); (c) boto3's paginator
alone (this process's CPU is then botocore's request and XML work); (d) 100 GETs of one state record through the
store, one after another. Per row: wall, this process's CPU, moto's CPU (utime + stime of its process, from
/proc/PID/stat) per page, pages and keys (counted from botocore's responses), the 1-minute load average.

    python bench/s3_listing_floor.py [--models 1000] [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BUCKET, PREFIX, GOAL_S, GETS = "fleet", "farm", 5.0, 100
STALE_EVERY = 20  # as bench/fleet_views.py: one model in 20 has a newer export and a second run


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def store_keys(models: int) -> list[str]:
    """Every key of a fleet's store after `status --record`, spelled by trtfarm.layout."""
    from bench.fleet_views import fleet_doc
    from trtfarm import layout

    doc = fleet_doc()
    labels = {k: f"{t['flavour']}-{t['version']}" for k, t in doc["toolchains"].items()}
    targets = [(t["id"], t["gpu"], labels[t["toolchain"]]) for t in doc["targets"]]
    keys = []
    for i in range(models):
        name = f"m{i:04d}"
        for generation in range(2 if i % STALE_EVERY == 0 else 1):
            onnx = _digest(f"{name}/{generation}")
            export = layout.export_prefix(name, f"2026{generation + 1:02d}01T000000{i:06d}Z-{onnx[:12]}")
            keys += [layout.export_file_key(export, "farm.yaml"), layout.export_file_key(export, layout.EXPORT_NAME),
                     layout.report_key(name, f"nightly-{generation + 1}", layout.OUTCOMES_NAME)]
        onnx = _digest(f"{name}/0")
        for target, gpu, label in targets:
            prefix = layout.plan_prefix(name, onnx, gpu, label, _digest(f"{name}/{target}"))
            keys += [layout.plan_key(prefix), layout.manifest_key(prefix), layout.release_key(name, gpu, label)]
        keys.append(layout.state_key(name))
    return keys


def moto_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(what: str, pid: int, counts: dict, run) -> dict:
    """Run ``run()`` once: wall, this process's CPU, moto's CPU, pages and keys listed, load."""
    counts.update(pages=0, keys=0)
    moto, cpu, t = moto_cpu_s(pid), time.process_time(), time.perf_counter()
    run()
    wall, cpu, moto = time.perf_counter() - t, time.process_time() - cpu, moto_cpu_s(pid) - moto
    return {"what": what, "wall_s": wall, "cpu_s": cpu, "moto_cpu_s": moto, "pages": counts["pages"],
            "keys": counts["keys"], "load": os.getloadavg()[0]}


def measure(server, keys: list[str]) -> list[dict]:
    """The four rows, against the filled server."""
    import boto3

    from trtfarm.state.survey import StoreSurvey
    from trtfarm.store.s3 import S3Store

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{server.port}", region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
    counts = {"pages": 0, "keys": 0}

    def listed(parsed, **_):
        counts["pages"] += 1
        counts["keys"] += len(parsed.get("Contents", []))

    client.meta.events.register("after-call.s3.ListObjectsV2", listed)
    store, pid = S3Store(BUCKET, PREFIX, client=client), server.proc.pid
    state = keys[-1].removeprefix(f"{PREFIX}/")
    store.get(state)  # the connection made before any row: each row is a running command's requests
    pages = client.get_paginator("list_objects_v2")
    return [timed("trtfarm: whole store", pid, counts, lambda: sum(1 for _ in store.list_versions(""))),
            timed("trtfarm: StoreSurvey", pid, counts, lambda: StoreSurvey(store, None, runs=True)),
            timed("boto3 paginator alone", pid, counts,
                  lambda: sum(len(p.get("Contents", [])) for p in pages.paginate(Bucket=BUCKET, Prefix=PREFIX))),
            timed(f"{GETS} GETs, one by one", pid, counts, lambda: [store.get(state) for _ in range(GETS)])]


def conclusion(rows: list[dict]) -> str:
    """The listing's wall against the goal, in one line."""
    survey, get = rows[1], rows[3]["wall_s"] / GETS
    left = GOAL_S - survey["wall_s"]
    verdict = (f"over the whole {GOAL_S:.0f} s goal by {-left:.1f} s before any GET" if left < 0 else
               f"{left:.1f} s left of {GOAL_S:.0f} s, room for {left / get:,.0f} GETs at {get * 1000:.0f} ms")
    return (f"StoreSurvey's listings alone take {survey['wall_s']:.1f} s of wall ({survey['pages']} pages; moto's CPU "
            f"{survey['moto_cpu_s']:.1f} s, this process's {survey['cpu_s']:.1f} s; load {survey['load']:.1f}): "
            f"{verdict}; a cold status also reads one state record per model.")


def print_rows(console, models: int, objects: int, rows: list[dict]) -> None:
    """The table and the conclusion."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"listing {objects:,} objects ({models} models x 20 targets) on moto's S3 server",
                  box=box.SIMPLE, pad_edge=False)
    for col in ("what", "wall s", "CPU s", "moto CPU s", "moto/page", "pages", "load"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for r in rows:
        per = f"{r['moto_cpu_s'] / r['pages']:.3f}" if r["pages"] else ""
        table.add_row(r["what"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['moto_cpu_s']:.2f}", per,
                      str(r["pages"] or ""), f"{r['load']:.1f}")
    console.print(table)
    console.print("CPU: this process's; moto CPU: moto's process's (moto/page: per page of up to 1,000 keys); "
                  "load: the 1-minute load average after the row.")
    console.print(conclusion(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="the smallest scale (3 models): a few seconds, for CI")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.models < 1:
        raise SystemExit("--models must be at least 1")
    if args.smoke:
        args.models = 3
    from rich.console import Console

    from bench._moto import MotoProcess

    console = Console(stderr=args.json)
    keys = [f"{PREFIX}/{k}" for k in store_keys(args.models)]
    with tempfile.TemporaryDirectory(prefix="trtfarm-s3-floor-") as tmp:
        (Path(tmp) / "keys").write_text("\n".join(keys))
        t = time.perf_counter()
        server = MotoProcess(fill=(BUCKET, Path(tmp) / "keys"), start_s=600)
        console.print(f"setup: moto's server filled with {len(keys):,} objects in {time.perf_counter() - t:.1f} s")
        try:
            rows = measure(server, keys)
        finally:
            server.stop()
    if any(r["keys"] != len(keys) for r in rows[:3]):
        raise SystemExit(f"a listing missed objects: {[r['keys'] for r in rows[:3]]} of {len(keys)}")
    if args.json:
        print(json.dumps({"models": args.models, "targets": 20, "objects": len(keys), "cores": os.cpu_count(),
                          "goal_s": GOAL_S, "rows": rows, "conclusion": conclusion(rows)}, indent=2))
        return
    print_rows(console, args.models, len(keys), rows)


if __name__ == "__main__":
    main()
