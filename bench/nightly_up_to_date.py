"""The nightly run when every target is up to date: 100 registered models x 10 targets, nothing to build.

Setup (not timed): moto's S3 server on 127.0.0.1, a 10-GPU TensorRT-RTX fleet, MODELS registered exports of the
example encoder (different weights each), each built once and published for all 10 targets, and each model's state
recorded (as the run that builds a model records it). Timed:

- `core`: the same decision without Prefect (list the registry, read each export's record and build spec, plan the
  targets, the store's listings and each model's state record: each target's cell released), the floor for any
  orchestrator;
- `flow`: the build-matrix flow in farm mode on a real Prefect server (`prefect server start` on 127.0.0.1, as
  tests/farm_server.py starts it), as the schedule runs it: it must dispatch nothing and report every target up to
  date. Goal: core <= 2 s, flow <= 4 s.

With ``--server URL`` the flow runs on a running Prefect server instead of one started for the bench.

    python bench/nightly_up_to_date.py [--models 100] [--server URL] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GPUS = [("rtx-3060", "NVIDIA GeForce RTX 3060", "8.6"), ("rtx-3070", "NVIDIA GeForce RTX 3070", "8.6"),
        ("rtx-3080", "NVIDIA GeForce RTX 3080", "8.6"), ("rtx-3090", "NVIDIA GeForce RTX 3090", "8.6"),
        ("rtx-4070", "NVIDIA GeForce RTX 4070", "8.9"), ("rtx-4080", "NVIDIA GeForce RTX 4080", "8.9"),
        ("rtx-4090", "NVIDIA GeForce RTX 4090", "8.9"), ("rtx-5070", "NVIDIA GeForce RTX 5070", "12.0"),
        ("rtx-5080", "NVIDIA GeForce RTX 5080", "12.0"), ("rtx-5090", "NVIDIA GeForce RTX 5090", "12.0")]
FARM_YAML = "name: {name}\nprecision: fp32\nprofiles:\n  - input_ids: 1x16:16x128:32x512\n" \
            "    attention_mask: 1x16:16x128:32x512\n"


def fleet_yaml() -> str:
    gpus = "".join(f'  {k}: {{nvml_name: "{n}", compute_capability: "{cc}", memory_gib: 24, pool: {k}}}\n'
                   for k, n, cc in GPUS)
    targets = "".join(f"  - {{id: {k}-rtx1.7, gpu: {k}, toolchain: rtx-1.7, release_on: built}}\n"
                      for k, _, _ in GPUS)
    return f'version: 1\ntoolchains:\n  rtx-1.7: {{flavour: tensorrt_rtx, version: "1.7.1.116"}}\ngpus:\n{gpus}' \
           f"targets:\n{targets}"


def seed_store(store_uri: str, fleet: Path, models: int, work: Path) -> None:
    """Register ``models`` exports and publish every target of each (one RTX build per model)."""
    from examples.encoder import make_model
    from trtfarm.building.build import build_group
    from trtfarm.building.precision_runner import with_precision
    from trtfarm.modelfile import model_source
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.project.spec_file import spec_for_model, spec_precision, spec_profiles
    from trtfarm.publishing.registry import register_export
    from trtfarm.store import open_store
    from trtfarm.vocabulary.fleet import select_targets
    from trtfarm.vocabulary.targets import group_by_build, plan_targets

    store = open_store(store_uri)
    targets = select_targets(load_fleet(fleet))
    for i in range(models):
        folder = work / f"model{i:03d}"
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(make_model.encoder_model(1000 + i).SerializeToString(deterministic=True))
        (folder / "farm.yaml").write_text(FARM_YAML.format(name=f"enc{i:03d}"))
        register_export(store, folder)
        spec, _ = spec_for_model(folder / "model.onnx")
        recipe, calib, heldout = spec_precision(folder / "model.onnx", spec)
        model = with_precision(store, model_source(folder / "model.onnx", spec.name), recipe, calib, heldout)
        profiles = spec_profiles(folder / "model.onnx", spec)[0]
        for group in group_by_build(plan_targets(model, model.plan_digest, targets, profiles, None)):
            build_group(store, model, group, profiles)
        print(f"\rseeded {i + 1}/{models} models", end="", flush=True)
    print()
    from trtfarm.state.recorder import record_states

    record_states(store, load_fleet(fleet), by="bench seed")  # each model's state, as the run that built it records


def core_decision(store_uri: str, fleet: Path) -> tuple[int, int]:
    """Everything the nightly decides, with no orchestrator: (models, builds to run)."""
    from trtfarm.pipeline import plan_run
    from trtfarm.planning.requests import MatrixRequest
    from trtfarm.run_setup import find_exports
    from trtfarm.store import open_store

    store = open_store(store_uri)
    exports = find_exports(store, None)
    plans = plan_run(MatrixRequest(store=store_uri, targets_file=str(fleet)), store, exports, farm=True)
    return len(exports), sum(len(p.jobs) for p in plans)


def nightly(store_uri: str, fleet: Path) -> list:
    from flows.build_matrix import build_matrix
    from trtfarm.planning.requests import MatrixRequest

    return asyncio.run(build_matrix(MatrixRequest(store=store_uri, targets_file=str(fleet), dispatch="farm")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--server", help="a running Prefect server's URL (http://HOST:PORT) to use, not a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from bench._moto import start_moto_bucket

    server, _ = start_moto_bucket("nightly")
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
    store = "s3://nightly/farm"
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "gpu_targets.yaml"
        fleet.write_text(fleet_yaml())
        t = time.perf_counter()
        seed_store(store, fleet, args.models, Path(tmp) / "exports")
        console.print(f"setup: {args.models} models x {len(GPUS)} targets published in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        n_models, todo = core_decision(store, fleet)
        core_s = time.perf_counter() - t
        assert todo == 0, f"{todo} targets not up to date after seeding"
        from tests.farm_server import Farm

        (Path(tmp) / "farm").mkdir()
        farm = Farm(Path(tmp) / "farm", {}, server=args.server)
        try:
            farm.start_server()
            os.environ["PREFECT_API_URL"] = farm.api
            runs = []
            for _ in range(2):
                t = time.perf_counter()
                rows = nightly(store, fleet)
                runs.append(time.perf_counter() - t)
                assert len(rows) == n_models * len(GPUS) and {r.outcome.status for r in rows} == {"up-to-date"}, \
                    {r.outcome.status for r in rows}
        finally:
            farm.stop()
    server.stop()
    if args.json:
        import json

        print(json.dumps({"models": n_models, "targets": n_models * len(GPUS), "core_s": round(core_s, 3),
                          "flow_s": round(min(runs), 3), "flow_first_s": round(runs[0], 3)}))
        return
    table = Table(title=f"nightly run, every target up to date ({n_models} models x {len(GPUS)} targets, moto S3)")
    for col in ("what", "wall s", "per model ms", "per target ms"):
        table.add_column(col, justify="right" if col != "what" else "left")
    n = n_models * len(GPUS)
    for name, s in [("core decision, no Prefect", core_s), ("build-matrix flow, 1st run", runs[0]),
                    ("build-matrix flow, 2nd run", runs[1])]:
        table.add_row(name, f"{s:.1f}", f"{1000 * s / n_models:.0f}", f"{1000 * s / n:.1f}")
    console.print(table)


if __name__ == "__main__":
    main()
