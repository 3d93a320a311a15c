"""Farm soak: many child builds over 4 pools and 8 worker hosts, with hosts lost, reclaimed and cut off, a worker
killed, one restarted and the store's endpoint restarted, then the store checked object by object.

Starts the integration tests' farm (tests/farm_server.py: Postgres, `prefect server start`, `trtfarm pools sync`,
`trtfarm farm deploy`, which adds the lost-host automation) with two `trtfarm worker` processes per pool, each on a
host of its own: a network namespace joined to the farm by a veth pair (tests/hosts.py; where namespaces cannot be
made, hosts are process groups and the soak says so). moto's S3 runs as its own process behind a TCP relay: the relay
is the store's endpoint (moto keeps objects in memory, so restarting moto itself would empty the store; restarting
the endpoint in front of it is what an S3 or MinIO restart looks like to a client). MODELS exports of the example
encoder (a different seed each) are registered; each builds for 4 TensorRT-RTX targets with 4 builder settings, one
per pool, so each model is 4 child runs. One nightly-style `farm run --wait` builds them all. While it runs:

- at a quarter of the children: one worker is SIGKILLed alone (its child keeps running and reports), and one running
  child process is SIGKILLed (its worker sees it crash; the parent resubmits it once);
- at 30 %: a host with a running child goes away, worker and child together (`kill`);
- at 40 %: a host with a running child is reclaimed with a notice: its `trtfarm worker` gets SIGTERM (`notice`);
- at half: another worker is stopped and started again, and the endpoint is stopped for ENDPOINT_DOWN_S seconds;
- at 55 %: a host with a running child is cut off for PARTITION_S seconds (`partition`), then comes back.

Reports: children completed, crashed and resubmitted, jobs completed twice (a cut-off child that came back late),
lost (a job with no completed child), stuck (runs not final at the end); for each host fault, seconds from the fault
to the lost child's Crashed state, to its resubmission, and to the release of its target; the Prefect server's CPU
and the p50/p95 of submit-to-running; and the store afterwards: every manifest's plan present with the recorded
sha256, every release pointer naming an existing manifest and moved once, no temporaries.

With ``--faults none`` the same farm builds the same way and the store is checked the same way, with no fault struck
(the smallest scale, which CI runs). With ``--server URL`` the soak uses a running Prefect server on this machine
instead of starting Postgres and one (the hosts reach it through a relay on the host network's address); it counts
only the child runs it made.

    python bench/farm_soak.py [--models 50] [--faults all|none] [--server URL] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POOLS = ("rtx-4090", "rtx-5090", "gpu-l4", "gpu-h100")  # build-target deployments of prefect.yaml
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
  rtx-4080: {nvml_name: "NVIDIA GeForce RTX 4080", compute_capability: "8.9", memory_gib: 16, pool: gpu-l4}
  rtx-5080: {nvml_name: "NVIDIA GeForce RTX 5080", compute_capability: "12.0", memory_gib: 16, pool: gpu-h100}
targets:
  - {id: rtx4090-o0, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 0}}
  - {id: rtx5090-o1, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 1}}
  - {id: rtx4080-o2, gpu: rtx-4080, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 2}}
  - {id: rtx5080-o3, gpu: rtx-5080, toolchain: rtx-1.7, release_on: built, settings: {optimization_level: 3}}
"""
FARM_YAML = ("name: {name}\nprecision: fp32\nprofiles:\n  - input_ids: 1x8:4x32:8x64\n"
             "    attention_mask: 1x8:4x32:8x64\n")
ENDPOINT_DOWN_S = 5.0
PARTITION_S = 180.0
HOST_FAULTS = ((0.30, "kill", "gpu-l4"), (0.40, "notice", "gpu-h100"), (0.55, "partition", "rtx-5090"))
SINCE: list[datetime] = []  # when this soak's farm run started: older child runs on a shared server are not its own
TARGET_GPU = {"rtx4090-o0": "rtx-4090", "rtx5090-o1": "rtx-5090", "rtx4080-o2": "rtx-4080", "rtx5080-o3": "rtx-5080"}


class Relay:
    """A TCP relay on a fixed loopback port to moto: the store's endpoint, which can be stopped and started."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        with socket.socket() as s:
            s.bind((host, 0))
            self.port = s.getsockname()[1]
        self.host, self.target, self.proc = host, target_port, None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--relay", self.host, str(self.port),
                                      str(self.target)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the relay did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # connections in flight are cut, as when an endpoint goes away
            self.proc.wait()


def relay_main(host: str, port: int, target: int) -> None:
    """The relay process: accept on ``host:port``, connect to the target on 127.0.0.1, copy bytes both ways."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(256)

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        conn, _ = server.accept()
        try:
            up = socket.create_connection(("127.0.0.1", target))
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, up), (up, conn)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its waited-for children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=50, help="exports to build (4 child runs each; default 50)")
    parser.add_argument("--workers-per-pool", type=int, default=2)
    parser.add_argument("--faults", choices=("all", "none"), default="all",
                        help="strike every fault (default) or none: a fault-free run, the smallest scale")
    parser.add_argument("--server", help="a running Prefect server's URL (http://HOST:PORT) to use, not a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--relay", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay:
        relay_main(args.relay[0], int(args.relay[1]), int(args.relay[2]))
        return
    doc = soak(args.models, args.workers_per_pool, args.faults == "all", args.server)
    if args.json:
        print(json.dumps(doc))
    else:
        print_table(doc)


def soak(models: int, per_pool: int, faults_on: bool = True, server: str | None = None) -> dict:
    from bench._moto import MotoProcess
    from examples.encoder import make_model
    from tests.farm_server import Farm, processes_of_flow_run
    from tests.hosts import HostNetwork
    from trtfarm.store import open_store

    net = HostNetwork()
    events: list[str] = [] if net.available else [f"no network namespaces ({net.why_not}): hosts are process groups"]
    moto = MotoProcess()
    relay = Relay(moto.port, net.address)
    relay.start()
    bucket = f"soak-{uuid.uuid4().hex[:6]}"
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{net.address}:{relay.port}"}
    os.environ.update(aws)
    import boto3

    boto3.client("s3").create_bucket(Bucket=bucket)
    store_uri = f"s3://{bucket}/store"
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fleet = home / "gpu_targets.yaml"
        fleet.write_text(FLEET)
        if server:  # the hosts reach a server of this namespace's 127.0.0.1 through a relay on the net's address
            api_relay = Relay(int(server.rsplit(":", 1)[1]), net.address)
            api_relay.start()
        farm = Farm(home, {**aws, "TRTFARM_STORE": store_uri, "TRTFARM_TARGETS": str(fleet),
                           "PREFECT_LOGGING_LEVEL": "WARNING"}, address=net.address,
                    server=server and f"http://{net.address}:{api_relay.port}")
        os.environ["PREFECT_API_URL"] = farm.api  # this process reads the soak's server only (never an ephemeral one)
        try:
            farm.start_server()
            farm.trtfarm("pools", "sync")
            farm.trtfarm("farm", "deploy")  # the deployments and the lost-host automation
            farm.spawn("worker-control", [sys.executable, "-m", "trtfarm", "worker", "--pool", "trtfarm-control",
                                          "--name", "soak-control"])
            workers, hosts = {}, {}
            for pool in POOLS:
                for i in range(per_pool):
                    hosts[f"{pool}-{i}"] = net.host(f"{pool}-{i}")
                    workers[f"{pool}-{i}"] = start_worker(farm, hosts, pool, i)
            for i in range(models):
                folder = home / f"m{i}"
                folder.mkdir()
                (folder / "model.onnx").write_bytes(make_model.encoder_model(100 + i).SerializeToString(
                    deterministic=True))
                (folder / "farm.yaml").write_text(FARM_YAML.format(name=f"soak{i}"))
                farm.trtfarm("models", "push", str(folder))
            expected = models * len(POOLS)
            store = open_store(store_uri)

            def released(run_name: str) -> bool:  # run_name = <model>-<target>-<attempt>
                return store.get(release_key(run_name.rsplit("-", 1)[0])) is not None

            server_pid = farm.procs["server"].pid if "server" in farm.procs else None  # a shared one: not ours
            cpu0, t0 = cpu_seconds(server_pid) if server_pid else 0.0, time.perf_counter()
            SINCE[:] = [datetime.now(timezone.utc)]  # the child runs of this soak are those made from now on
            # to files, not pipes: 200 outcomes are more than a pipe holds, and nobody reads it until the end
            run_out, run_err = open(home / "farm-run.json", "w+"), open(home / "farm-run.err", "w+")  # noqa: SIM115
            run = subprocess.Popen([sys.executable, "-m", "trtfarm", "farm", "run", "--wait", "--json",
                                    "--child-timeout", "7200"], env=farm.env, cwd=REPO, stdout=run_out,
                                   stderr=run_err, text=True)
            faults = {"quarter": False, "half": False}
            struck: list[dict] = []
            while faults_on and run.poll() is None:
                time.sleep(2)
                done = count_final_children(farm.api)
                if not faults["quarter"] and done >= expected // 4:
                    faults["quarter"] = True
                    victim = f"{POOLS[0]}-0"
                    os.kill(workers[victim].pid, signal.SIGKILL)
                    events.append(f"{time.perf_counter() - t0:.0f} s: SIGKILL worker {victim} (pid only)")
                    crashed = None  # builds are short: a child is Running only now and then, so look for one
                    deadline = time.monotonic() + 120
                    while crashed is None and time.monotonic() < deadline:
                        crashed = kill_one_running_child(farm.api, processes_of_flow_run, exclude_pool=POOLS[0])
                        time.sleep(0 if crashed else 0.2)
                    events.append(f"{time.perf_counter() - t0:.0f} s: SIGKILL child run {crashed}")
                if not faults["half"] and done >= expected // 2:
                    faults["half"] = True
                    victim = f"{POOLS[1]}-0"
                    os.killpg(workers[victim].pid, signal.SIGTERM)
                    try:
                        workers[victim].wait(30)
                    except subprocess.TimeoutExpired:
                        os.killpg(workers[victim].pid, signal.SIGKILL)
                        workers[victim].wait()
                    workers[victim] = start_worker(farm, hosts, POOLS[1], 0, again=True)
                    events.append(f"{time.perf_counter() - t0:.0f} s: worker {victim} stopped and started again")
                    relay.stop()
                    events.append(f"{time.perf_counter() - t0:.0f} s: store endpoint stopped")
                    time.sleep(ENDPOINT_DOWN_S)
                    relay.start()
                    events.append(f"{time.perf_counter() - t0:.0f} s: store endpoint started again")
                host_faults(farm.api, hosts, workers, done / expected, struck, events, t0, released)
            run.wait()
            wall = time.perf_counter() - t0
            cpu = cpu_seconds(server_pid) - cpu0 if server_pid else None
            from bench._host_faults import settle

            with _client(farm.api) as client:
                settle(client, struck)  # a cut-off child may come back after the run: see what it does
            out, errs = (home / "farm-run.json").read_text(), (home / "farm-run.err").read_text()
            run_out.close()
            run_err.close()
            result = json.loads(out) if out.strip().startswith("{") else {"state": f"exit {run.returncode}",
                                                                           "outcomes": [], "stderr": errs[-2000:]}
            doc = {"models": models, "expected_children": expected, "wall_s": round(wall, 1),
                   "server_cpu_s": cpu and round(cpu, 1), "server_cpu_share": cpu and round(cpu / wall, 3),
                   "faults": "all" if faults_on else "none", "run_state":
                   result.get("state"), "events": events, **children_report(farm.api, expected),
                   "targets_outcomes": {s: sum(r["status"] == s for r in result.get("outcomes", []))
                                        for s in ("built", "up-to-date", "skipped", "failed")},
                   "store": check_store(store_uri), "host_faults": host_figures(farm.api, struck, store_uri)}
            # lost: a target the run did not report built, or that has no release pointer in the store
            doc["lost"] = expected - min(doc["targets_outcomes"]["built"], doc["store"]["pointers"])
            if run.returncode not in (0, 1):
                doc["farm_run_stderr"] = errs[-2000:]
        finally:
            farm.stop()
            net.close()
            relay.stop()
            if server:
                api_relay.stop()
            moto.stop()
    return doc


def start_worker(farm, hosts: dict, pool: str, i: int, again: bool = False):
    """`trtfarm worker` of ``pool`` on its host ``<pool>-<i>``."""
    name = f"soak-{pool}-{i}"
    return farm.spawn_on(hosts[f"{pool}-{i}"], f"worker-{pool}-{i}" + ("-again" if again else ""),
                         [sys.executable, "-m", "trtfarm", "worker", "--pool", pool, "--name", name])


def host_faults(api: str, hosts: dict, workers: dict, progress: float, struck: list[dict], events: list[str],
                t0: float, released) -> None:
    """Strike each host fault of ``HOST_FAULTS`` whose time has come, on a host of its pool while its child builds."""
    from bench._host_faults import strike

    for fraction, kind, pool in HOST_FAULTS:
        if progress < fraction or any(f["fault"] == kind for f in struck):
            continue
        with _client(api) as client:
            found = strike(kind, client, hosts, workers, pool, released, PARTITION_S)
        if found is None:
            struck.append({"fault": kind, "host": None, "run_name": "", "run_id": None, "at": time.time()})
            events.append(f"{time.perf_counter() - t0:.0f} s: {kind}: no child built on a {pool} host for 120 s")
            continue
        name, run = found
        struck.append({"fault": kind, "host": name, "run_name": run.name, "run_id": run.id, "at": time.time()})
        events.append(f"{time.perf_counter() - t0:.0f} s: {kind} host {name} while child {run.name} builds")


def release_key(job: str) -> str:
    """The release pointer of a job's target (job = <model>-<target>)."""
    from trtfarm import layout

    model, target = job.split("-", 1)
    return layout.release_key(model, TARGET_GPU[target], "tensorrt_rtx-1.7.1.116")


def host_figures(api: str, struck: list[dict], store_uri: str) -> list[dict]:
    """The figures of each host fault (bench/_host_faults.py)."""
    from bench._host_faults import figures
    from trtfarm.store import open_store

    with _client(api) as client:
        return figures([f for f in struck if f["run_id"]], _child_runs(api), client, open_store(store_uri),
                       release_key)


def _client(api: str):
    from prefect.client.orchestration import get_client

    assert os.environ.get("PREFECT_API_URL") == api
    return get_client(sync_client=True)


def _child_runs(api: str) -> list:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterExpectedStartTime

    mine = FlowRunFilter(expected_start_time=FlowRunFilterExpectedStartTime(after_=SINCE[0])) if SINCE else None
    with _client(api) as client:
        runs, offset = [], 0
        while True:
            page = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-target"])),
                                         flow_run_filter=mine, limit=200, offset=offset)
            runs += page
            if len(page) < 200:
                return runs
            offset += 200


def count_final_children(api: str) -> int:
    return sum(1 for r in _child_runs(api) if r.state and r.state.is_final())


def kill_one_running_child(api: str, processes_of_flow_run, exclude_pool: str) -> str | None:
    """SIGKILL the process of one running child whose worker is alive: its worker reports the run crashed."""
    for r in _child_runs(api):
        if r.state and r.state.is_running() and r.work_pool_name != exclude_pool:
            pids = processes_of_flow_run(str(r.id))
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            if pids:
                return f"{r.name} ({r.id})"
    return None


def children_report(api: str, expected: int) -> dict:
    runs = _child_runs(api)
    by_state: dict[str, int] = {}
    for r in runs:
        by_state[r.state.type.value if r.state else "NONE"] = by_state.get(r.state.type.value if r.state else "NONE",
                                                                            0) + 1
    completed_jobs: dict[str, int] = {}
    for r in runs:
        if r.state and r.state.is_completed():
            job = r.name.rsplit("-", 1)[0]  # flow_run_name = <job name>-<attempt>
            completed_jobs[job] = completed_jobs.get(job, 0) + 1
    waits = sorted((r.start_time - r.created).total_seconds() for r in runs if r.start_time and r.created)
    with _client(api) as client:  # a worker took it (Pending) -> its process runs the flow (Running)
        pending = {r.id: next((x.timestamp for x in client.read_flow_run_states(r.id) if x.type.value == "PENDING"),
                              None) for r in runs if r.start_time}
    starts = sorted((r.start_time - pending[r.id]).total_seconds() for r in runs if pending.get(r.id))
    resubmitted = sum(1 for r in runs if r.name.endswith("-2"))
    return {"child_runs": len(runs), "states": by_state, "completed_jobs": len(completed_jobs),
            "crashed": by_state.get("CRASHED", 0), "resubmitted": resubmitted,
            "completed_twice": sum(n - 1 for n in completed_jobs.values()),  # a cut-off child that came back
            "jobs_no_child_completed": expected - len(completed_jobs),  # Prefect's view: a run crashed late
            "stuck": sum(1 for r in runs if not (r.state and r.state.is_final())),
            "submit_to_running_p50_s": round(statistics.median(waits), 2) if waits else None,
            "submit_to_running_p95_s": round(waits[int(0.95 * (len(waits) - 1))], 2) if waits else None,
            "pending_to_running_p50_s": round(statistics.median(starts), 2) if starts else None,
            "pending_to_running_p95_s": round(starts[int(0.95 * (len(starts) - 1))], 2) if starts else None}


def check_store(store_uri: str) -> dict:
    """Every manifest's plan is there with its sha256; every pointer names an existing manifest; no temporaries."""
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.publishing.release import read_pointer
    from trtfarm.store import open_store

    store = open_store(store_uri)
    keys = list(store.list("plans/"))
    manifests = [k for k in keys if k.endswith("/manifest.json")]
    bad_plans = []
    for key in manifests:
        m = read_manifest(store, key)
        blob = store.get(m.plan.key)
        if blob is None or hashlib.sha256(blob.data).hexdigest() != m.plan.sha256:
            bad_plans.append(key)
    orphans = [k for k in keys if k.endswith("/model.plan") and k.rsplit("/", 1)[0] + "/manifest.json" not in keys]
    pointers = {k: read_pointer(store, k)[0] for k in store.list("releases/")}
    bad_pointers = [k for k, p in pointers.items() if store.get(p.manifest) is None]
    return {"manifests": len(manifests), "plans_bad": len(bad_plans), "plans_without_manifest": len(orphans),
            "pointers": len(pointers), "pointers_bad": len(bad_pointers),
            "pointers_moved_twice": sum(len(p.history) > 1 for p in pointers.values())}


def print_table(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    s = doc["store"]
    table = Table(title=f"farm soak: {doc['models']} models x 4 TensorRT-RTX targets = {doc['expected_children']} "
                        "child builds, 4 pools x 2 worker hosts, Prefect server on Postgres, moto S3 behind a relay")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("farm run state, wall time", f"{doc['run_state']}, {doc['wall_s']} s"),
            ("children completed (jobs) / child runs", f"{doc['completed_jobs']} / {doc['child_runs']}"),
            ("crashed / resubmitted", f"{doc['crashed']} / {doc['resubmitted']}"),
            ("jobs completed twice (a late return) / lost / stuck",
             f"{doc['completed_twice']} / {doc['lost']} / {doc['stuck']}"),
            ("submit to running p50 / p95 (all children are submitted at once: mostly queueing)",
             f"{doc['submit_to_running_p50_s']} s / {doc['submit_to_running_p95_s']} s"),
            ("a worker's pickup (Pending) to Running p50 / p95: the child's process start",
             f"{doc['pending_to_running_p50_s']} s / {doc['pending_to_running_p95_s']} s"),
            ("Prefect server CPU", "not measured (a shared server)" if doc["server_cpu_s"] is None else
             f"{doc['server_cpu_s']} s ({100 * doc['server_cpu_share']:.0f} % of one core)"),
            ("store: manifests / bad plans / plans without manifest",
             f"{s['manifests']} / {s['plans_bad']} / {s['plans_without_manifest']}"),
            ("store: pointers / naming a missing manifest / moved twice",
             f"{s['pointers']} / {s['pointers_bad']} / {s['pointers_moved_twice']}")]
    for f in doc["host_faults"]:
        rows.append((f"{f['fault']} ({f['host']}, {f['run_name']}): detected / resubmitted / released after; "
                     "the resubmission took; the lost child ended",
                     f"{f['detect_s']} / {f['resubmit_s']} / {f['release_s']} s; {f['resubmission_s']} s; "
                     f"{f['lost_child_ended']}"))
    for row in rows:
        table.add_row(*row)
    from rich.markup import escape

    Console().print(table)
    for e in doc["events"]:
        Console().print(escape(e), highlight=False)


if __name__ == "__main__":
    main()
