"""From an export landing to its release: the farm's path, phase by phase, on a warm farm.

Starts a real farm on 127.0.0.1 (the integration tests' harness: `prefect server` on PostgreSQL, `trtfarm pools
sync`, the `on-export` and `build-target/rtx-4090` deployments of prefect.yaml, one `trtfarm worker` for the
control pool and one for the GPU pool, moto's S3 server as the store and the exports bucket) and `trtfarm webhook
serve`. Then, warm (one landing first, not counted), it lands N new exports one after another, as a training
pipeline would: `farm.yaml` and `model.onnx` into the exports bucket, then a signed post to the receiver's `/hook`.
Each export is a new model (one TensorRT-RTX target, released on build), so each landing builds and releases once.

Every mark is read back from what the farm recorded, in seconds from the post: the receiver's answer (202), the
event as the server received it, the parent (`on-export`'s build-matrix run) and the child (build-target) run's
states (Scheduled: created; Pending: a worker took it; Running: its interpreter started and loaded the flow), the
child's first log line (the flow's body), its build task, the builder's first phase log (the build's start; the
build's end is that plus the manifest's `wall_s`), the release pointer's event time (written by the child once the
plan is published), the child's end, and in the parent: its report and state-record tasks and its end.

The goal (issue 60): an export released within its build + 2 s, i.e. (pointer written - post) - build <= 2 s,
median over N.

    python bench/export_to_release.py [--n 5] [--server URL] [--json] [--cold-start] [--poll-only] [--poll S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POOL = "rtx-4090"
POOLS = ("trtfarm-control", POOL)
GOAL_S = 2.0
COLD_START, POLL_ONLY, POLL_S = False, False, 1.0  # the workers' options (--cold-start, --poll-only, --poll)
SECRET = "bench-export-to-release"
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090, count: 2}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""
FARM_YAML = "name: {name}\nprecision: fp32\nprofiles:\n  - input_ids: 1x16:16x128:32x512\n" \
            "    attention_mask: 1x16:16x128:32x512\n"
# (key, what the mark is): the table's rows, in the order of the path
MARKS = (
    ("accepted", "webhook accepted (202 back)"),
    ("event", "event received by the server"),
    ("parent_scheduled", "parent run created (Scheduled)"),
    ("parent_pending", "parent taken by its worker"),
    ("parent_running", "parent running (interpreter)"),
    ("parent_body", "parent flow body (first log)"),
    ("planned", "parent: planned (plan_models end)"),
    ("child_scheduled", "child run created by the parent"),
    ("child_pending", "child taken by its worker"),
    ("child_running", "child running (interpreter)"),
    ("child_body", "child flow body (first log)"),
    ("build_start", "build start (builder's 1st phase)"),
    ("build_end", "build end (+ manifest wall_s)"),
    ("released", "published, pointer written"),
    ("child_end", "child run Completed"),
    ("report_start", "parent: report (child seen)"),
    ("record_start", "parent: state record start"),
    ("recorded", "parent: state recorded"),
    ("parent_end", "parent run Completed"),
)


def _post_hook(base: str, uri: str) -> tuple[int, dict]:
    from trtfarm.triggers.webhook import sign

    body = json.dumps({"model_uri": uri}).encode()
    now = str(int(time.time()))
    req = urllib.request.Request(f"{base}/hook", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Trtfarm-Timestamp": now,
        "X-Trtfarm-Signature": sign(SECRET, now, body)})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, json.loads(resp.read())


def _land(s3, bucket: str, name: str, seed: int) -> str:
    """A training pipeline's drop: the spec first, then the model. Returns the export folder's URI."""
    from examples.encoder import make_model

    s3.put_object(Bucket=bucket, Key=f"exports/{name}/farm.yaml", Body=FARM_YAML.format(name=name).encode())
    s3.put_object(Bucket=bucket, Key=f"exports/{name}/model.onnx",
                  Body=make_model.encoder_model(seed).SerializeToString(deterministic=True))
    return f"s3://{bucket}/exports/{name}"


def _ts(value) -> float | None:
    if value is None:
        return None
    return value.timestamp() if isinstance(value, datetime) else datetime.fromisoformat(value).timestamp()


def _state_times(client, run_id) -> dict[str, float]:
    """The first time the run entered each state type (SCHEDULED, PENDING, RUNNING, COMPLETED, ...)."""
    times: dict[str, float] = {}
    for s in sorted(client.read_flow_run_states(run_id), key=lambda s: s.timestamp):
        times.setdefault(s.type.value, s.timestamp.timestamp())
    return times


def _event_received(api: str, name: str, since: float) -> float | None:
    """When the server received the export's event (this landing's: a shared server may hold older ones)."""
    occurred = {"since": datetime.fromtimestamp(since - 5, timezone.utc).isoformat()}
    body = json.dumps({"filter": {"event": {"name": ["trtfarm.model.exported"]}, "occurred": occurred,
                                  "resource": {"id": [f"trtfarm.model.{name}"]}}, "limit": 5}).encode()
    req = urllib.request.Request(f"{api}/events/filter", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        events = json.loads(resp.read()).get("events", [])
    return min((_ts(e["received"]) for e in events), default=None)


def _runs(client, deployment: str | None = None, flow_name: str | None = None):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName, FlowFilter, FlowFilterName

    if deployment:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))
    return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])))


def _task_times(client, run_id) -> dict[str, tuple[float | None, float | None]]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return {t.name.rsplit("-", 1)[0]: (_ts(t.start_time), _ts(t.end_time)) for t in tasks}


def _logs(client, run_id) -> list[tuple[float, str]]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return sorted((log.timestamp.timestamp(), log.message) for log in logs)


def _pointer_at(store, name: str) -> tuple[float | None, float | None]:
    """When the model's stable pointer was written (its last event) and the build's own seconds (its manifest)."""
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.vocabulary.pointer import pointer_from_json

    keys = [k for k in store.list(f"releases/{name}/") if k.endswith(".json")]
    if len(keys) != 1:
        return None, None
    pointer = pointer_from_json(store.get(keys[0]).data)
    manifest = read_manifest(store, pointer.manifest)
    return _ts(pointer.history[-1].at), manifest.build.wall_s


def _wait_parent(client, uri: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in _runs(client, deployment="on-export") if r.parameters["request"].get("model") == uri]
        if runs and runs[0].state.is_final():
            return runs[0]
        time.sleep(0.2)
    raise RuntimeError(f"the on-export run of {uri} did not end within {timeout:.0f} s")


def _child(client, name: str, since: float):
    children = [r for r in _runs(client, flow_name="build-target") if r.parameters.get("job")
                and r.parameters["job"]["model"]["name"] == name and _ts(r.created) >= since - 1]
    if len(children) != 1:
        raise RuntimeError(f"expected one build-target run for {name}, found {len(children)}")
    return children[0]


def _marks(client, api: str, store, name: str, posted: float, accepted: float, parent) -> dict:
    """Every mark of one landing, in seconds from the post (None: not recorded)."""
    child = _child(client, name, posted)
    parent_states, child_states = _state_times(client, parent.id), _state_times(client, child.id)
    released, wall_s = _pointer_at(store, name)
    deadline = time.monotonic() + 20  # task runs and logs reach the server as events and log batches, a bit later
    while True:
        parent_tasks, logs, parent_logs = _task_times(client, parent.id), _logs(client, child.id), \
            _logs(client, parent.id)
        phases = [t for t, m in logs if m.startswith("rtx-4090-rtx1.7: ")]
        if (phases and "record_model_states" in parent_tasks and parent_tasks["record_model_states"][1]
                and "report_run" in parent_tasks) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    build_start = phases[0] if phases else None
    at = {"accepted": accepted, "event": _event_received(api, name, posted),
          "parent_scheduled": _ts(parent.created), "parent_pending": parent_states.get("PENDING"),
          "parent_running": parent_states.get("RUNNING"),
          "parent_body": next((t for t, m in parent_logs if " mode: " in m), None),
          "planned": parent_tasks.get("plan_models", (None, None))[1], "child_scheduled": _ts(child.created),
          "child_pending": child_states.get("PENDING"), "child_running": child_states.get("RUNNING"),
          "child_body": next((t for t, m in logs if m.startswith("building ")), None),
          "build_start": build_start, "build_end": build_start + wall_s if build_start and wall_s else None,
          "released": released, "child_end": child_states.get("COMPLETED"),
          "report_start": parent_tasks.get("report_run", (None, None))[0],
          "record_start": parent_tasks.get("record_model_states", (None, None))[0],
          "recorded": parent_tasks.get("record_model_states", (None, None))[1],
          "parent_end": parent_states.get("COMPLETED")}
    out = {k: None if v is None else round(v - posted, 3) for k, v in at.items()}
    tasks = [(f"parent task {name}", times) for name, times in parent_tasks.items()] + \
        [(f"child task {name}", times) for name, times in _task_times(client, child.id).items()]
    out["trace"] = sorted([(round(t - posted, 3), f"parent: {m[:60]}") for t, m in parent_logs]
                          + [(round(t - posted, 3), f"child: {m[:60]}") for t, m in logs]
                          + [(round(t - posted, 3), f"{what} {edge}") for what, times in tasks
                             for edge, t in zip(("start", "end"), times, strict=True) if t])
    out.update(build_s=wall_s, state=parent.state.type.value, child_state=child.state.type.value)
    if released is not None and wall_s is not None:
        out["release_over_build_s"] = round(released - posted - wall_s, 3)
    return out


def _one(farm, client, s3, bucket: str, store, base: str, name: str, seed: int) -> dict:
    uri = _land(s3, bucket, name, seed)
    posted = time.time()
    status, answer = _post_hook(base, uri)
    accepted = time.time()
    if status != 202 or answer.get("triggered") != [uri]:
        raise RuntimeError(f"the receiver answered {status}: {answer}")
    parent = _wait_parent(client, uri)
    return _marks(client, farm.api, store, name, posted, accepted, parent)


def _start(farm, port: int, bucket: str) -> None:
    """Pools, deployments, the two workers and the receiver; returns once every pool is READY."""
    from tests.farm_server import TRTFARM, farm_client, wait_for

    farm.start_server()
    farm.trtfarm("pools", "sync")
    farm.deploy("on-export", POOL)
    for pool in POOLS:  # `--cold-start`: each run in a fresh interpreter, as before the warm one (issue 60)
        farm.spawn(f"worker-{pool}", [*TRTFARM, "worker", "--pool", pool, "--name", f"test-{pool}",
                                      *(["--cold-start"] if COLD_START else []),
                                      *(["--poll-only"] if POLL_ONLY else [])],
                   env={"PREFECT_WORKER_QUERY_SECONDS": str(POLL_S)})
    farm.spawn("webhook", [*TRTFARM, "webhook", "serve", "--port", str(port), "--allow-root",
                           f"s3://{bucket}/exports"], env={"TRTFARM_WEBHOOK_SECRET": SECRET})
    farm.wait_http(f"http://127.0.0.1:{port}/healthz", 120)
    with farm_client(farm) as c:
        wait_for(lambda: all(c.read_work_pool(p).status.value == "READY" for p in POOLS), 180,
                 "the workers to come online")


def run(n: int, server: str | None) -> dict:
    """Start the farm, land one export to warm it, then ``n`` timed ones; every landing's marks."""
    import boto3

    from bench._moto import start_moto_bucket
    from tests.farm_server import Farm, farm_client, free_port
    from trtfarm.store import open_store

    bucket = f"e2r-{uuid.uuid4().hex[:6]}"
    moto, aws = start_moto_bucket(bucket)
    os.environ.update(aws)
    landings = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "gpu_targets.yaml").write_text(FLEET)
        store_uri = f"s3://{bucket}/store"
        farm = Farm(home, {**aws, "TRTFARM_STORE": store_uri, "TRTFARM_TARGETS": str(home / "gpu_targets.yaml")},
                    server=server)
        try:
            port = free_port()
            _start(farm, port, bucket)
            s3, store = boto3.client("s3"), open_store(store_uri)
            with farm_client(farm) as client:
                for i in range(n + 1):  # the first one warms the farm: not counted
                    landings.append(_one(farm, client, s3, bucket, store, f"http://127.0.0.1:{port}", f"e2r{i}",
                                         100 + i))
        finally:
            farm.stop()
            moto.stop()
    return {"n": n, "landings": landings[1:], "warm_up": landings[0]}


def summary(doc: dict) -> dict:
    """Medians over the timed landings: each mark's time from the post, and the goal met or not."""
    rows = doc["landings"]

    def median(key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    marks = {k: median(k) for k, _ in MARKS}
    over = median("release_over_build_s")
    return {"marks": marks, "build_s": median("build_s"), "release_over_build_s": over,
            "goal_s": GOAL_S, "goal_met": over is not None and over <= GOAL_S,
            "states": sorted({r["state"] for r in rows} | {r["child_state"] for r in rows})}


def print_table(doc: dict) -> None:
    s = doc["summary"]
    print(f"export -> release, {doc['n']} landing(s) after 1 warm-up; load {doc['load']} (1/5/15 min)")
    print(f"{'mark':<37}{'at (s)':>9}{'phase (s)':>11}")
    prev = 0.0
    known = sorted((s["marks"][key], what) for key, what in MARKS if s["marks"][key] is not None)
    for at, what in known:  # in the order they happened: each phase is the time since the mark before
        print(f"{what:<37}{at:>9.2f}{at - prev:>11.2f}")
        prev = at
    for what in (what for key, what in MARKS if s["marks"][key] is None):
        print(f"{what:<37}{'-':>9}{'-':>11}")
    verdict = "met" if s["goal_met"] else "NOT met"
    print(f"build (manifest wall_s) {s['build_s']} s; released {s['release_over_build_s']} s after the post "
          f"beyond it;\ngoal <= {GOAL_S:.0f} s (median): {verdict}; states {', '.join(s['states'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="timed landings (after one warm-up)")
    parser.add_argument("--server", help="a running Prefect server's URL (http://HOST:PORT) to use, not a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--trace", action="store_true", help="also print the last landing's logs and task runs")
    parser.add_argument("--cold-start", action="store_true", help="workers start each run in a fresh interpreter")
    parser.add_argument("--poll-only", action="store_true", help="workers take runs on their poll alone")
    parser.add_argument("--poll", type=float, default=1.0, help="the workers' poll interval, s (trtfarm's default: 1)")
    args = parser.parse_args()
    global COLD_START, POLL_ONLY, POLL_S
    COLD_START, POLL_ONLY, POLL_S = args.cold_start, args.poll_only, args.poll
    load_before = [round(x, 2) for x in os.getloadavg()]
    doc = run(args.n, args.server)
    doc["load"] = load_before
    doc["cold_start"], doc["poll_only"], doc["poll_s"] = COLD_START, POLL_ONLY, POLL_S
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc["summary"] = summary(doc)
    if args.json:
        print(json.dumps(doc))
        return
    print_table(doc)
    if args.trace:
        for t, what in doc["landings"][-1]["trace"]:
            print(f"{t:8.2f}  {what}")


if __name__ == "__main__":
    main()
