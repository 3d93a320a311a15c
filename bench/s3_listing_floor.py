"""What listing a fleet-sized store costs on moto's S3 server: the floor under a cold `status` there (issues 46, 58).

A view lists every object of the store to know each model's state record is current (StoreSurvey,
trtfarm/state/record.py), then reads one state record per model. Issue 58's goal: a cold `status` on S3 at 1,000
models x 20 targets spends at most 2 s of client CPU, its listings issued in parallel per model prefix.

Setup (not timed): moto's S3 server as its own process (bench/_moto.py), its bucket filled in that process before
it listens (``python -m bench._moto --fill``: 64,000 PUTs over HTTP would take about 5 minutes), with the keys of
the real layout (trtfarm.layout) and 16-byte bodies: for MODELS models x the 20 targets of bench/fleet_views.py, an
export record and farm.yaml, each target's plan, manifest and release pointer, a run's outcomes and the model's state
record (64 objects); one model in 20 has a newer export and a second run (3 more). 1,000 models: 64,150 objects.

Timed, each once, in this process, through a client made as trtfarm's S3 store makes its own (trtfarm/store/
s3_listing.py): (a) the store listing the whole store in one listing (``list_versions``); (b) StoreSurvey's listings
as `status` makes them (first pages side by side, then the long ones in parts split at model prefixes); (c) the
same listing as (a) through a plain boto3 client (botocore's own parse: what a view cost before); (d) every model's
state record read, ``READ_THREADS`` at once, as a cold status reads them. Per row: wall, this process's CPU (and its
kernel part), moto's CPU (utime + stime of its process, from /proc/PID/stat), requests (pages and GETs, counted from
botocore's events), the longest chain of pages one after another, the keys in every page read, the 1-minute load.
The conclusion projects S3's wall from the counted requests at 20-50 ms each.

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BUCKET, PREFIX, GOAL_CPU_S = "fleet", "farm", 2.0
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
    """Run ``run()`` once: wall, this process's CPU (of it in the kernel: ``sys_s``), moto's CPU, requests, pages and
    keys listed, load.

    ``kept``: the objects the row's listing yields (a part's last page may hold keys of the next part: read, not
    kept). ``chain``: the most pages one listing or part asked for one after another (on S3 each page waits for the
    one before it), ``rounds``: listings that had to wait for others (the survey's parts wait for its first pages).
    """
    counts.update(pages=0, keys=0, gets=0, chains={})
    moto, cpu, t = moto_cpu_s(pid), os.times(), time.perf_counter()
    kept = run()
    wall, moto, after = time.perf_counter() - t, moto_cpu_s(pid) - moto, os.times()
    user, system = after.user - cpu.user, after.system - cpu.system
    chains = counts["chains"]
    return {"what": what, "wall_s": wall, "cpu_s": user + system, "sys_s": system, "moto_cpu_s": moto,
            "pages": counts["pages"],
            "keys": counts["keys"], "kept": kept, "gets": counts["gets"], "listings": len(chains),
            "chain": max(chains.values(), default=0), "load": os.getloadavg()[0]}


def counted(client, counts: dict):
    """``client`` with its ListObjectsV2 pages (by listing: prefix and start) and GETs counted into ``counts``."""
    def asked(params, context, **_):
        context["part"] = (params.get("Prefix"), params.get("StartAfter"))

    def listed(parsed, context, **_):
        counts["pages"] += 1
        counts["keys"] += len(parsed.get("Contents", []))
        counts["chains"][context.get("part")] = counts["chains"].get(context.get("part"), 0) + 1

    def got(**_):
        counts["gets"] += 1

    client.meta.events.register("before-parameter-build.s3.ListObjectsV2", asked)
    client.meta.events.register("after-call.s3.ListObjectsV2", listed)
    client.meta.events.register("after-call.s3.GetObject", got)
    return client


def listed_store():
    """The S3 store, counting the objects its listings yield (not the keys of pages it reads past a part's end)."""
    import threading

    from trtfarm.store.s3 import S3Store

    class Listed(S3Store):
        kept, lock = 0, threading.Lock()

        def list_versions_between(self, prefix, after=None, upto=None):
            for obj in super().list_versions_between(prefix, after, upto):
                with self.lock:
                    self.kept += 1
                yield obj

    return Listed


def measure(server, keys: list[str]) -> list[dict]:
    """The rows, against the filled server."""
    import boto3

    from trtfarm.state.survey import READ_THREADS, StoreSurvey
    from trtfarm.store.s3 import S3Store
    from trtfarm.store.s3_listing import listing_session

    Listed = listed_store()  # noqa: N806 - a class
    settings = {"endpoint_url": f"http://127.0.0.1:{server.port}", "region_name": "us-east-1",
                "aws_access_key_id": "x", "aws_secret_access_key": "x"}
    counts: dict = {"pages": 0, "keys": 0, "gets": 0, "chains": {}}
    client = counted(listing_session().client("s3", **settings), counts)  # as trtfarm's S3 store makes its client
    plain = counted(boto3.client("s3", **settings), counts)  # botocore's own parse
    store, pid = S3Store(BUCKET, PREFIX, client=client), server.proc.pid
    records = [k.removeprefix(f"{PREFIX}/") for k in keys if "/state/" in k]
    store.get(records[0])  # the connection made before any row: each row is a running command's requests

    def survey() -> int:
        listed = Listed(BUCKET, PREFIX, client=client)
        StoreSurvey(listed, None, runs=True)
        return listed.kept

    def gets() -> int:
        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            return sum(1 for b in pool.map(store.get, records) if b is not None)

    pages = plain.get_paginator("list_objects_v2")
    return [timed("the store, one listing", pid, counts, lambda: sum(1 for _ in store.list_versions(""))),
            timed("StoreSurvey", pid, counts, survey),
            timed("botocore's own parse", pid, counts,
                  lambda: sum(len(p.get("Contents", [])) for p in pages.paginate(Bucket=BUCKET, Prefix=PREFIX))),
            timed(f"records, {READ_THREADS} at once", pid, counts, gets)]


def projected(row: dict, page_ms: float) -> float:
    """Seconds of wall a row's requests would take on S3 at ``page_ms`` a request, ``READ_THREADS`` at once.

    Its longest chain of pages one after another, or its requests spread over the threads, whichever is more; a
    listing in parts first waits for its first round (one page of each listing side by side).
    """
    from trtfarm.state.survey import READ_THREADS

    requests = row["pages"] + row["gets"]
    rounds = 1 if row["listings"] > 1 else 0
    return (rounds + max(row["chain"], -(-requests // READ_THREADS))) * page_ms / 1000


def conclusion(rows: list[dict]) -> str:
    """Client CPU against the goal, and the wall projected for S3, in one line."""
    from trtfarm.state.survey import READ_THREADS

    survey, get = rows[1], rows[3]
    cpu = survey["cpu_s"] + get["cpu_s"]
    low, high = (projected(survey, ms) + projected(get, ms) for ms in (20, 50))
    return (f"A cold status's requests to S3 cost {cpu:.2f} s of this process's CPU (listings "
            f"{survey['cpu_s']:.2f} s in {survey['pages']} pages of {survey['listings']} listings and parts, the "
            f"longest {survey['chain']} pages; {get['gets']} GETs {get['cpu_s']:.2f} s; goal: the whole status in "
            f"{GOAL_CPU_S:.0f} s; load {survey['load']:.1f}). On S3 at 20-50 ms a request, {READ_THREADS} at once: "
            f"{low:.1f}-{high:.1f} s of wall; moto's own CPU for them: "
            f"{survey['moto_cpu_s'] + get['moto_cpu_s']:.1f} s.")


def print_rows(console, models: int, objects: int, rows: list[dict]) -> None:
    """The table and the conclusion."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"listing {objects:,} objects ({models} models x 20 targets) on moto's S3 server",
                  box=box.SIMPLE, pad_edge=False)
    for col in ("what", "wall s", "CPU s", "sys s", "moto s", "requests", "chain", "keys", "load"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for r in rows:
        table.add_row(r["what"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['sys_s']:.2f}",
                      f"{r['moto_cpu_s']:.2f}", str(r["pages"] + r["gets"]), str(r["chain"] or ""),
                      f"{r['keys']:,}" if r["keys"] else "", f"{r['load']:.1f}")
    console.print(table)
    console.print("CPU: this process's (sys: of it in the kernel: moto closes each connection after one answer, "
                  "so every request connects anew); moto: moto's process's CPU; requests: pages listed and GETs; "
                  "chain: the most pages of one listing or part, one after another; keys: in every page read; "
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
    if [r["kept"] for r in rows] != [len(keys)] * 3 + [args.models]:
        raise SystemExit(f"a listing missed objects: {[r['kept'] for r in rows]} of {len(keys)}")
    if args.json:
        print(json.dumps({"models": args.models, "targets": 20, "objects": len(keys), "cores": os.cpu_count(),
                          "goal_cpu_s": GOAL_CPU_S, "rows": rows, "conclusion": conclusion(rows)}, indent=2))
        return
    print_rows(console, args.models, len(keys), rows)


if __name__ == "__main__":
    main()
