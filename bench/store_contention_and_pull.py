"""Timing-cache merge throughput under contention, and `trtfarm pull` of a multi-GB plan with bounded memory.

Both run against file:// and against moto's S3 server (a separate process on 127.0.0.1, so its own memory is not
counted; moto keeps objects in memory, so its throughput measures moto, not S3). That server is the tests' serialised
moto (tests/moto_serialised.py): moto as shipped checks If-Match and writes later with no lock, so two merges carrying
the same ETag can both win and an entry is lost, which S3 never does. `--plain-moto` runs moto as shipped to show it.

    python bench/store_contention_and_pull.py [--writers 4 16] [--merges 25] [--plan-gib 3] [--s3-plan-gib 1]
    python bench/store_contention_and_pull.py --writers 16 --merges 10 --runs 20 --skip-pull [--plain-moto]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]


def union(current: bytes, ours: bytes) -> bytes:
    merged = json.loads(current)
    merged.update({k: v for k, v in json.loads(ours).items() if k not in merged})
    return json.dumps(merged).encode()


def merge_run(uri: str, writers: int, merges: int) -> dict:
    from trtfarm.building.timing_cache import merge_timing_cache
    from trtfarm.store import open_store

    store = open_store(uri)
    key = f"timing-caches/bench-{writers}/{time.time_ns()}.cache"
    latencies, attempts = [], []
    lock, barrier = threading.Lock(), threading.Barrier(writers)

    def writer(w: int) -> None:
        barrier.wait()
        for i in range(merges):
            t = time.perf_counter()
            m = merge_timing_cache(store, key, json.dumps({f"{w}-{i}": i}).encode(), union)
            with lock:
                latencies.append(time.perf_counter() - t)
                attempts.append(m.attempts)

    start = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    entries = len(json.loads(store.get(key).data))
    latencies.sort()
    return {"merges/s": writers * merges / wall, "p50 ms": 1000 * statistics.median(latencies),
            "p99 ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
            "retries/merge": sum(attempts) / len(attempts) - 1, "entries": entries, "lost": writers * merges - entries}


PULL = """
import sys, time
from trtfarm.runtime.pull import pull_release
from trtfarm.store import open_store
def hwm():  # VmHWM: peak RSS of this address space (ru_maxrss would include the forking parent's)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
store = open_store(sys.argv[1])
store.get("releases/none")  # connect, load the service model
before = hwm()
t = time.perf_counter()
got = pull_release(store, "big", "h100", ["tensorrt-11.4.0.106"], sys.argv[2])
print(time.perf_counter() - t, got.bytes, hwm(), before)
"""


def publish_big(uri: str, gib: float, tmp: Path) -> None:
    """A synthetic multi-GB plan published and released like a real one."""
    from trtfarm.publishing.publish import publish_plan
    from trtfarm.releases.moves import move_release
    from trtfarm.store import open_store

    sys.path.insert(0, str(REPO))
    from tests.test_manifest import sample

    plan = tmp / "big.plan"
    block = os.urandom(64 << 20)
    with open(plan, "wb") as f:
        for _ in range(int(gib * 16)):
            f.write(block)
    store = open_store(uri)

    def manifest_for(info):
        m = sample()
        m.model.name, m.plan = "big", info
        return m

    pub = publish_plan(store, "plans/big/x/h100/tensorrt-11.4.0.106/b", plan, manifest_for)
    move_release(store, pub.manifest_key, pub.manifest, release_on="built", reason="bench", force=True)
    plan.unlink()


def pull_run(uri: str, gib: float, tmp: Path) -> dict:
    publish_big(uri, gib, tmp)
    out = subprocess.run([sys.executable, "-c", PULL, uri, str(tmp / "pulled.plan")], capture_output=True,
                         text=True, check=True).stdout.split()
    wall, size, rss_kib, before_kib = float(out[0]), int(out[1]), int(out[2]), int(out[3])
    (tmp / "pulled.plan").unlink()
    return {"GiB": size / 2**30, "wall s": wall, "MiB/s": size / 2**20 / wall, "peak RSS MiB": rss_kib / 1024,
            "before pull MiB": before_kib / 1024}


def start_moto(plain: bool = False) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = "moto.server" if plain else "tests.moto_serialised"
    proc = subprocess.Popen([sys.executable, "-m", server, "-H", "127.0.0.1", "-p", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": url})
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    import boto3

    boto3.client("s3").create_bucket(Bucket="bench")
    return proc, "s3://bench/farm"


def table(title: str, rows: list[tuple[str, dict]]) -> Table:
    t = Table(title=title)
    t.add_column("run")
    for col in rows[0][1]:
        t.add_column(col, justify="right")
    for name, r in rows:
        t.add_row(name, *(f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" for v in r.values()))
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--merges", type=int, default=25)
    ap.add_argument("--plan-gib", type=float, default=3.0)
    ap.add_argument("--s3-plan-gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=1, help="repeat each merge run (a lost entry shows in some runs only)")
    ap.add_argument("--skip-pull", action="store_true", help="only the merges")
    ap.add_argument("--plain-moto", action="store_true", help="moto as shipped (unserialised writes): loses entries")
    args = ap.parse_args()
    console = Console()
    moto, s3_uri = start_moto(args.plain_moto)
    s3_name = "s3 (plain moto)" if args.plain_moto else "s3 (moto)"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            file_uri = (Path(tmp) / "store").as_uri()
            merges = [(f"{name} x{w} #{r + 1}", merge_run(uri, w, args.merges)) for name, uri in
                      (("file://", file_uri), (s3_name, s3_uri)) for w in args.writers for r in range(args.runs)]
            console.print(table(f"timing-cache merges, {args.merges} per writer (lost: entries missing at the end)",
                                merges))
            lossy = [name for name, r in merges if r["lost"]]
            console.print(f"runs that lost entries: {len(lossy)} of {len(merges)} {lossy or ''}", highlight=False)
            if not args.skip_pull:
                pulls = [("file://", pull_run(file_uri, args.plan_gib, Path(tmp))),
                         (s3_name, pull_run(s3_uri, args.s3_plan_gib, Path(tmp)))]
                console.print(table("trtfarm pull of a multi-GB plan (streamed, sha256 checked)", pulls))
    finally:
        moto.terminate()
        moto.wait()
    if lossy:
        sys.exit(1)


if __name__ == "__main__":
    main()
