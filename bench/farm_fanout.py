"""Farm fan-out: overhead and efficiency of build-matrix over real workers, against the builds themselves.

Starts a real farm on 127.0.0.1 (the integration tests' harness: `prefect server`, `trtfarm pools sync`, prefect.yaml
deployments, one `trtfarm worker` per pool, moto's S3 server), registers MODELS exports of the example encoder and
runs one nightly-style build-matrix over 4 TensorRT-RTX targets on 2 pools. Then reads, from Prefect and the
manifests: the farm's wall time, each child's run time, and each build's own time.

- efficiency = sum of build times / (wall time x build workers): the share of the workers' time spent building;
- overhead per child = (child run time - its build time): process start, imports, fetch, digest, publish; the
  median over children is the figure to beat (goal: <= 1 s);
- the no-op rerun: `trtfarm farm run --wait` with every target published (goal: <= 5 s).

With ``--server URL`` the bench uses a running Prefect server instead of starting Postgres and one, and reads only
the child runs it made.

    python bench/farm_fanout.py [--models 4] [--server URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FARM_YAML = "name: {name}\nprecision: fp32\nprofiles:\n  - input_ids: 1x16:16x128:32x512\n" \
            "    attention_mask: 1x16:16x128:32x512\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--slots", type=int, default=None,
                        help="children at once per GPU pool (default: the fleet's GPU counts, 3 per pool); 1 runs "
                             "one child per pool at a time, as the two build workers the efficiency counts")
    parser.add_argument("--server", help="a running Prefect server's URL (http://HOST:PORT) to use, not a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from bench._moto import start_moto_bucket
    from examples.encoder import make_model
    from tests.farm_server import Farm
    from tests.flows.test_farm import FOUR_RTX_TARGETS_TWO_POOLS
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.store import open_store

    bucket = f"fanout-{uuid.uuid4().hex[:6]}"
    moto, aws = start_moto_bucket(bucket)
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fleet = home / "gpu_targets.yaml"
        fleet.write_text(FOUR_RTX_TARGETS_TWO_POOLS)
        store_uri = f"s3://{bucket}/store"
        farm = Farm(home, {**aws, "TRTFARM_STORE": store_uri, "TRTFARM_TARGETS": str(fleet),
                           "PREFECT_LOGGING_LEVEL": "WARNING"}, server=args.server)
        try:
            farm.start_server()
            farm.trtfarm("pools", "sync")
            if args.slots:
                for pool in ("rtx-4090", "rtx-5090"):
                    farm.run([sys.executable, "-m", "prefect", "work-pool", "set-concurrency-limit", pool,
                              str(args.slots)])
            farm.deploy("build-matrix", "rtx-4090", "rtx-5090")
            for pool in ("trtfarm-control", "rtx-4090", "rtx-5090"):
                farm.start_worker(pool)
            for i in range(args.models):
                folder = home / f"m{i}"
                folder.mkdir()
                (folder / "model.onnx").write_bytes(make_model.encoder_model(50 + i).SerializeToString(
                    deterministic=True))
                (folder / "farm.yaml").write_text(FARM_YAML.format(name=f"enc{i}"))
                farm.trtfarm("models", "push", str(folder))
            t, since = time.perf_counter(), datetime.now(timezone.utc)
            result = json.loads(farm.trtfarm("farm", "run", "--wait", "--json").stdout)
            wall = time.perf_counter() - t
            t = time.perf_counter()
            again = json.loads(farm.trtfarm("farm", "run", "--wait", "--json").stdout)
            rerun = time.perf_counter() - t
            children, phases = child_runs(farm.api, since)
            store = open_store(store_uri)
            built = [r for r in result["outcomes"] if r["status"] == "built"]
            builds = {}
            for r in built:
                m = read_manifest(store, r["manifest"].split(f"{store.uri}/", 1)[1])
                builds[m.build.flow_run_id] = m.build.wall_s  # one build per child, published for its class
        finally:
            farm.stop()
            moto.stop()
    build_sum = sum(builds.values())
    child_sum = sum(children.values())
    overheads = [s - builds.get(run_id, 0.0) for run_id, s in children.items()]
    median = {name: round(statistics.median(p[i] - (builds.get(run_id, 0.0) if i == 1 else 0.0)
                                            for run_id, p in phases.items()), 2) if phases else None
              for i, name in enumerate(("before_task_s", "task_minus_build_s", "after_task_s", "pending_to_running_s"))}
    doc = {"builds": len(builds), "children": len(children), "wall_s": round(wall, 2),
           "build_s_sum": round(build_sum, 2), "per_child_overhead_s": round(statistics.median(overheads), 2)
           if overheads else None, "noop_rerun_s": round(rerun, 2), "state": result["state"],
           "targets_built": len(built), "targets": len(result["outcomes"]), "child_phases_median": median,
           "slots_per_pool": args.slots or fleet_slots()}
    if args.json:
        print(json.dumps(doc))
        return
    slots = f"{args.slots} child(ren) at once per pool" if args.slots else \
        f"the fleet's {fleet_slots()} children at once per pool"
    table = Table(title=f"farm fan-out: {args.models} models x 4 RTX targets, 2 pools x 1 worker ({slots}), "
                        "2-core machine, moto S3, Prefect server on Postgres")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("targets built", f"{len(built)} of {len(result['outcomes'])} (state {result['state']})"),
            ("child runs (one per build: model x compatibility class)", str(len(children))),
            ("farm wall time, submit to report", f"{wall:.1f} s"),
            ("sum of build times (TensorRT-RTX)", f"{build_sum:.2f} s"),
            ("sum of child run times", f"{child_sum:.1f} s"),
            ("overhead per child (run - build), median", f"{doc['per_child_overhead_s']} s"),
            ("  of which: run start to build task start", f"{median['before_task_s']} s"),
            ("  of which: build task, less the build", f"{median['task_minus_build_s']} s"),
            ("  of which: build task end to run end", f"{median['after_task_s']} s"),
            ("child Pending to Running, median (process start: Python, Prefect, the flow)",
             f"{median['pending_to_running_s']} s"),
            ("efficiency: builds / (wall x 2 workers)", f"{100 * build_sum / (wall * 2):.1f} %"),
            ("rerun, everything up to date", f"{rerun:.1f} s ({len(again['outcomes'])} targets, "
                                              f"{sorted({r['status'] for r in again['outcomes']})})")]
    for row in rows:
        table.add_row(*row)
    console.print(table)


def fleet_slots() -> int:
    """The GPU pools' concurrency limit from the benchmark's fleet (its GPU counts), as `trtfarm pools sync` sets it."""
    import yaml

    from tests.flows.test_farm import FOUR_RTX_TARGETS_TWO_POOLS
    from trtfarm.vocabulary.fleet import Fleet
    from trtfarm.workers.pools import desired_pools

    fleet = Fleet.model_validate(yaml.safe_load(FOUR_RTX_TARGETS_TWO_POOLS))
    return max(p.concurrency_limit for p in desired_pools(fleet) if p.gpus)


def child_runs(api: str, since: datetime) -> tuple[dict[str, float], dict[str, tuple[float, float, float, float]]]:
    """build-target runs and their durations (start to end), and for each (before its build task, the task, after
    it, Pending to Running: the worker took it, started its process, the engine loaded the flow): where a child's
    time goes, from the server. Only the runs made from ``since`` on (a shared server holds others')."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterId,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["build-target"])),
                                     flow_run_filter=FlowRunFilter(
                                         expected_start_time=FlowRunFilterExpectedStartTime(after_=since)))
        runs = [r for r in runs if r.start_time and r.end_time]
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[r.id for r in runs])))
        pending = {str(r.id): next((s.timestamp for s in client.read_flow_run_states(r.id)
                                    if s.type.value == "PENDING"), None) for r in runs}
    by_run = {str(t.flow_run_id): t for t in tasks if t.start_time and t.end_time}
    phases = {}
    for r in runs:
        t = by_run.get(str(r.id))
        if t is not None:
            phases[str(r.id)] = ((t.start_time - r.start_time).total_seconds(),
                                 (t.end_time - t.start_time).total_seconds(),
                                 (r.end_time - t.end_time).total_seconds(),
                                 (r.start_time - (pending[str(r.id)] or r.start_time)).total_seconds())
    return {str(r.id): (r.end_time - r.start_time).total_seconds() for r in runs}, phases


if __name__ == "__main__":
    main()
