"""`trtfarm status` and `trtfarm plan` on a big fleet: 1,000 models x 20 targets, store requests counted.

Setup (not timed): a synthetic store as a nightly leaves it, on the file store and on moto's S3 server (127.0.0.1, its
own process, as bench/nightly_up_to_date.py runs it). MODELS registered exports (an export record and farm.yaml each;
the model bytes are left out: no view reads them), each published and released for 20 targets (12 TensorRT targets on
six datacenter GPUs x two TensorRT versions, validated on their GPU; 8 TensorRT-RTX targets on RTX cards, released on
build). Each manifest is a real one (a TensorRT-RTX build of the example encoder on this CPU) with its model, target,
digests and build time rewritten, so every key and digest is the one the planner computes. 5% of the models have a
newer export registered and not built; for those, the latest run failed two targets.

Timed, each with the store wrapped to count every request (tests/store_requests.py), each in a fresh fork of a
measuring process that has imported trtfarm and made the store's client (a command after its start-up):
- `status` (all models x targets): cold (a fresh folder for TMPDIR, XDG_CACHE_HOME and TRTFARM_CACHE_DIR: no
  summary cache on this machine, every pointer, manifest and run read) and warm (the folder its cold run left);
- `plan` what-ifs: a TensorRT version bump (6 targets of every model rebuild), a new GPU model (2 new targets), no
  change; each cold and warm;
- `farm run --dry-run` (the same decisions against the store);
- `status --record` (each model's state computed and recorded in the store, as every run does for its models), then
  `status` and each `plan` what-if cold again, reading the records (one object per model, in place of its export
  record, farm.yaml and the manifests a what-if reads): each answer must equal the same view's cold one. On S3 the
  records are read from their index (state-index/, 32 objects), then once more without it (one GET per model).
Printed per run: wall and CPU time (on S3, moto's server process's CPU apart), the load, store requests (and
GETs); `--json` adds listings, writes and the files the run left in its cache folder. Goal (issue 46): a cold status
at most 3 s of CPU and 1,100 requests on the file store, a cold what-if at most 5 s; (issue 58) on S3, a cold status
at most 2 s of CPU. `--smoke` is the smallest scale (3 models, both stores; CI runs it).

    python bench/fleet_views.py [--models 1000] [--backend both|file|s3] [--s3-recorded-only] [--smoke]
                                 [--json]
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

DATACENTER = [("h100", "NVIDIA H100 80GB HBM3", "9.0", 80), ("h200", "NVIDIA H200", "9.0", 141),
              ("a100", "NVIDIA A100-SXM4-80GB", "8.0", 80), ("l40s", "NVIDIA L40S", "8.9", 48),
              ("l4", "NVIDIA L4", "8.9", 24), ("a10", "NVIDIA A10", "8.6", 24)]
RTX = [("rtx-3060", "NVIDIA GeForce RTX 3060", "8.6"), ("rtx-3080", "NVIDIA GeForce RTX 3080", "8.6"),
       ("rtx-3090", "NVIDIA GeForce RTX 3090", "8.6"), ("rtx-4070", "NVIDIA GeForce RTX 4070", "8.9"),
       ("rtx-4080", "NVIDIA GeForce RTX 4080", "8.9"), ("rtx-4090", "NVIDIA GeForce RTX 4090", "8.9"),
       ("rtx-5080", "NVIDIA GeForce RTX 5080", "12.0"), ("rtx-5090", "NVIDIA GeForce RTX 5090", "12.0")]
FARM_YAML = "name: {name}\nprecision: fp32\nprofiles:\n  - input_ids: 1x16:16x128:32x512\n" \
            "    attention_mask: 1x16:16x128:32x512\n"
STALE_EVERY = 20  # one model in 20 has a newer export registered (and two failed targets)


def fleet_doc() -> dict:
    gpus = {k: {"nvml_name": n, "compute_capability": cc, "memory_gib": mem, "pool": k} for k, n, cc, mem in DATACENTER}
    gpus.update({k: {"nvml_name": n, "compute_capability": cc, "memory_gib": 24, "pool": k} for k, n, cc in RTX})
    targets = [{"id": f"{k}-trt{v}", "gpu": k, "toolchain": f"trt-{v}"} for k, *_ in DATACENTER for v in ("10", "11")]
    targets += [{"id": f"{k}-rtx", "gpu": k, "toolchain": "rtx-1.7", "release_on": "built"} for k, *_ in RTX]
    return {"version": 1, "toolchains": {"trt-10": {"flavour": "tensorrt", "version": "10.16.1.11"},
                                         "trt-11": {"flavour": "tensorrt", "version": "11.4.0.106"},
                                         "rtx-1.7": {"flavour": "tensorrt_rtx", "version": "1.7.1.116"}},
            "gpus": gpus, "targets": targets}


def template_manifest(work: Path) -> dict:
    """A real manifest: the example encoder built for one RTX target on this machine."""
    import yaml

    from examples.encoder import make_model
    from trtfarm.pipeline import run_local
    from trtfarm.planning.requests import MatrixRequest
    from trtfarm.store import open_store

    doc = fleet_doc()
    one = {**doc, "targets": [t for t in doc["targets"] if t["id"] == "rtx-4090-rtx"]}
    (work / "one.yaml").write_text(yaml.safe_dump(one))
    (work / "encoder").mkdir()
    (work / "encoder/model.onnx").write_bytes(make_model.encoder_model(0).SerializeToString(deterministic=True))
    (work / "encoder/farm.yaml").write_text(FARM_YAML.format(name="encoder"))
    store = (work / "template-store").as_uri()
    run_local(MatrixRequest(model=str(work / "encoder/model.onnx"), store=store, targets_file=str(work / "one.yaml"),
                            dispatch="local"), report="none")
    s = open_store(store)
    return json.loads(s.get(next(k for k in s.list("plans/") if k.endswith("manifest.json"))).data)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def synthetic_objects(models: int, template: dict, fleet) -> dict[str, bytes]:
    """Every object of the store: key -> bytes (registry, plans, manifests, release pointers, run outcomes)."""
    from trtfarm import layout
    from trtfarm.profiles.profile import profile_from_args
    from trtfarm.vocabulary.exports import ExportFile, ExportRecord
    from trtfarm.vocabulary.fleet import select_targets
    from trtfarm.vocabulary.model import ModelSource
    from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer
    from trtfarm.vocabulary.targets import plan_targets

    targets = select_targets(fleet)
    profiles = [profile_from_args(["input_ids=1x16:16x128:32x512", "attention_mask=1x16:16x128:32x512"])]
    objects: dict[str, bytes] = {}

    def export(name: str, i: int, generation: int) -> ModelSource:
        onnx = _digest(f"{name}/{generation}")
        export_id = f"2026{generation + 1:02d}01T000000{i:06d}Z-{onnx[:12]}"
        prefix = layout.export_prefix(name, export_id)
        spec = FARM_YAML.format(name=name).encode()
        objects[layout.export_file_key(prefix, "farm.yaml")] = spec
        registered = f"2026-{generation + 1:02d}-01T00:00:00+00:00"
        record = ExportRecord(name=name, export_id=export_id, registered_at=registered,
                              onnx_digest=onnx, graph_digest=_digest(f"{name}/graph"), model_files=["model.onnx"],
                              files={"model.onnx": ExportFile(sha256=onnx, bytes=(20 + i % 200) << 20),
                                     "farm.yaml": ExportFile(sha256=hashlib.sha256(spec).hexdigest(),
                                                             bytes=len(spec))})
        objects[layout.export_file_key(prefix, layout.EXPORT_NAME)] = record.to_bytes()
        return ModelSource(name=name, path=Path("/absent/model.onnx"), source_uri=f"s3://bench/{prefix}/model.onnx",
                           onnx_digest=onnx, graph_digest=record.graph_digest, exported_at=record.registered_at)

    for i in range(models):
        name = f"m{i:04d}"
        model = export(name, i, 0)
        outcomes = []
        for p in plan_targets(model, model.onnx_digest, targets, profiles, None):
            t = p.target
            doc = json.loads(json.dumps(template))
            doc["model"].update(name=name, source_uri=model.source_uri, onnx_digest=model.onnx_digest,
                                graph_digest=model.graph_digest, exported_at=model.exported_at, files=[])
            doc["precision"]["converted_onnx_digest"] = model.onnx_digest
            doc["target"].update(target_id=t.id, gpu=t.gpu_key, gpu_name=t.gpu.nvml_name,
                                 compute_capability=t.gpu.compute_capability, compat_class=t.compat_class,
                                 flavour=t.toolchain.flavour.value, toolchain_version=t.toolchain.version)
            doc["build"].update(build_digest=p.build_digest, settings=t.settings.model_dump(mode="json"),
                                wall_s=float(60 + (i * 7 + len(t.id) * 13) % 900), built_for_target=t.id)
            doc["plan"].update(key=layout.plan_key(p.prefix), bytes=1024)
            if t.toolchain.flavour.value == "tensorrt":
                doc["verification"]["engine"] = {"status": "passed", "detail": "validated on its GPU", "figures": {}}
            manifest = json.dumps(doc, indent=2).encode()
            objects[layout.plan_key(p.prefix)] = b"\0" * 1024
            objects[layout.manifest_key(p.prefix)] = manifest
            at = "2026-01-02T00:00:00+00:00"
            pointer = ReleasePointer(model=name, gpu=t.gpu_key, toolchain=t.toolchain_label,
                                     manifest=layout.manifest_key(p.prefix), plan_key=layout.plan_key(p.prefix),
                                     plan_sha256=doc["plan"]["sha256"], onnx_digest=model.onnx_digest,
                                     build_digest=p.build_digest, exported_at=model.exported_at, version=1,
                                     history=[ReleaseEvent(action="release", manifest=layout.manifest_key(p.prefix),
                                                           onnx_digest=model.onnx_digest, exported_at=model.exported_at,
                                                           at=at, by="bench", reason="built by the nightly")])
            objects[p.release_key] = pointer.model_dump_json(indent=2).encode()
            outcomes.append({"target": t.id, "status": "up-to-date", "reason": "", "build_digest": p.build_digest})
        objects[layout.report_key(name, "nightly-1", layout.OUTCOMES_NAME)] = json.dumps(outcomes).encode()
        if i % STALE_EVERY == 0:  # a newer export, registered; the latest run failed two of its targets
            newer = export(name, i, 1)
            failed = [{"target": p.target.id, "status": "failed", "reason": "the tensorrt builder failed: out of "
                       "memory", "build_digest": p.build_digest}
                      for p in plan_targets(newer, newer.onnx_digest, targets[:2], profiles, None)]
            objects[layout.report_key(name, "nightly-2", layout.OUTCOMES_NAME)] = json.dumps(failed).encode()
    return objects


def write_file_store(root: Path, objects: dict[str, bytes]) -> None:
    """The file store's layout, written directly (the file store is a folder of these keys)."""
    for key, data in objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    reports = sorted(k for k in objects if k.endswith("/nightly-2/outcomes.json"))
    for key in reports:  # the second run after the first
        t = time.time() + 60
        os.utime(root / key, (t, t))


def write_s3_store(bucket: str, prefix: str, objects: dict[str, bytes]) -> None:
    import boto3

    client = boto3.client("s3")
    second = [k for k in objects if k.endswith("/nightly-2/outcomes.json")]
    first = [k for k in objects if k not in set(second)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=f"{prefix}/{k}", Body=objects[k]), first))
    time.sleep(1.1)  # the second run's outcomes are later (S3's LastModified has one-second resolution)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=f"{prefix}/{k}", Body=objects[k]), second))


MOTO_PID = "BENCH_MOTO_PID"  # moto's server process, whose CPU an S3 row reports apart from this process's


def moto_cpu_s(backend: str) -> float:
    """The CPU moto's server process has used so far (0 on the file store)."""
    from bench.s3_listing_floor import moto_cpu_s as used

    return used(int(os.environ[MOTO_PID])) if backend == "s3" and os.environ.get(MOTO_PID) else 0.0


def timed(view: str, cache: str, backend: str, run) -> dict:
    """Run ``run(open)`` once with every store request counted; the figures of one row."""
    from tests.store_requests import Tally, _open, counting

    tally = Tally()
    with counting(tally):
        t, cpu, moto = time.perf_counter(), time.process_time(), moto_cpu_s(backend)
        result = run(_open)
        wall, cpu, moto = time.perf_counter() - t, time.process_time() - cpu, moto_cpu_s(backend) - moto
    methods = tally.by_method()
    return {"scenario": f"{view}, {cache}", "view": view, "cache": cache, "backend": backend,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "moto_cpu_s": round(moto, 2),
            "load": round(os.getloadavg()[0], 1),
            "requests": tally.total,
            "listings": methods.get("list_versions", 0) + methods.get("list", 0) + methods.get("list_sizes", 0),
            "gets": methods.get("get", 0), "writes": sum(methods.get(m, 0) for m in (
                "put_if_absent", "compare_and_swap", "upload_file", "delete")), "result": result}


def in_fork(fn) -> dict:
    """``fn()`` in a forked copy of this process; its JSON result.

    The measuring process has imported trtfarm and run no view: each fork starts as a fresh command would,
    after its imports, with nothing a previous view left in memory.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, hand back the result, exit without the parent's exit handlers
        os.close(read)
        code, out = 0, b""
        try:
            out = json.dumps(fn()).encode()
        except BaseException:  # noqa: B036 - any failure is the child's exit status, told on stderr
            import traceback

            traceback.print_exc()
            code = 1
        with os.fdopen(write, "wb") as pipe:
            pipe.write(out)
        sys.stderr.flush()
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"a measured view failed (exit {os.waitstatus_to_exitcode(status)}); see above")
    return json.loads(data)


CACHE_VARIABLES = ("TMPDIR", "XDG_CACHE_HOME", "TRTFARM_CACHE_DIR")


def with_cache(folder: Path, fn):
    """``fn`` run with every per-machine cache the views may keep pointed at ``folder``."""
    def run():
        for var in CACHE_VARIABLES:
            os.environ[var] = str(folder)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        return fn()
    return run


def views(uri: str, fleet_file: Path) -> dict:
    """Each view by name: a function of ``open_store`` returning the view's counts."""
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.state.views import plan_fleet, status
    from trtfarm.vocabulary.fleet import Fleet

    current = load_fleet(fleet_file)
    bump = fleet_doc()
    bump["toolchains"]["trt-11"]["version"] = "11.5.0.20"
    gpu = fleet_doc()
    gpu["gpus"]["b200"] = {"nvml_name": "NVIDIA B200", "compute_capability": "10.0", "memory_gib": 180, "pool": "b200"}
    gpu["targets"] += [{"id": f"b200-trt{v}", "gpu": "b200", "toolchain": f"trt-{v}"} for v in ("10", "11")]
    proposals = {"TensorRT 11.5": Fleet.model_validate(bump),
                 "add a B200": Fleet.model_validate(gpu), "no change": current}
    out = {f"plan: {n}": (lambda o, p=p: plan_fleet(o(uri), current, p).counts()) for n, p in proposals.items()}
    out["status"] = lambda o: status(o(uri), current).counts()
    out["farm run --dry-run"] = lambda o: farm_dry_run(o(uri), current).counts()
    return out


def farm_dry_run(store, fleet):
    """``farm run --dry-run`` of every registered model: the run's planner decides, the what-if explains."""
    from trtfarm.planning.dry_run import planned_decisions
    from trtfarm.planning.requests import MatrixRequest
    from trtfarm.run_setup import find_exports
    from trtfarm.state.views import dry_run

    exports = find_exports(store, None)
    decided, refused, view = planned_decisions(MatrixRequest(store=store.uri), store, exports, fleet, None)
    return dry_run(store, fleet, exports, decided, refused, survey=view.survey)


def measure(spec: dict) -> list[dict]:
    """Every view cold, then warm, on each store of ``spec``; each run in a fork of this process.

    The imports and the store's client come before the forks (as a command's start-up, not timed here).
    Cold: a fresh folder for TMPDIR, XDG_CACHE_HOME and TRTFARM_CACHE_DIR (no summary cache on this machine).
    Warm: the same view again in a new fork, with the folder its cold run left.
    """
    import importlib

    from tests.store_requests import PRELOADED
    from trtfarm.store import open_store

    for name in ("trtfarm.state.views", *PRELOADED):  # imported once, before any fork
        importlib.import_module(name)
    rows = []
    for backend, uri in spec["stores"]:
        open_store(uri)  # the S3 client is made once per process: a command's start-up, not its view's work
        named = views(uri, Path(spec["fleet"]))
        if backend == "s3" and spec.get("s3_recorded_only"):  # the file store's views are the answers to match
            rows += recorded(spec, backend, uri, named, rows)
            continue
        for cache in ("cold", "warm"):
            for i, (view, run) in enumerate(named.items()):
                folder = Path(spec["caches"]) / backend / str(i)
                if cache == "cold":
                    folder.mkdir(mode=0o700, parents=True)
                row = in_fork(with_cache(folder, lambda v=view, r=run, c=cache, b=backend: timed(v, c, b, r)))
                row["cache_files"] = sum(1 for p in folder.rglob("*") if p.is_file())
                rows.append(row)
        rows += recorded(spec, backend, uri, named, rows)
    return rows


def recorded(spec: dict, backend: str, uri: str, named: dict, rows: list[dict]) -> list[dict]:
    """Each model's state recorded in the store (as runs do), then a cold status and cold what-ifs that read them.

    Each answer must be the same view's cold one without records: one record, the same story.
    """
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.state.recorder import record_states

    fleet = load_fleet(spec["fleet"])
    folder = Path(spec["caches"]) / backend / "recorded"
    folder.mkdir(mode=0o700, parents=True)
    record = in_fork(with_cache(folder, lambda: timed("status --record", "every model", backend, lambda o: {
        "models": len(record_states(o(uri), fleet, by="bench"))})))
    out = [record]
    for i, view in enumerate(v for v in named if v == "status" or v.startswith("plan: ")):
        fresh = Path(spec["caches"]) / backend / f"recorded-cold-{i}"
        fresh.mkdir(mode=0o700, parents=True)
        cold = in_fork(with_cache(fresh, lambda v=view: timed(v, "cold, recorded", backend, named[v])))
        before = next((r for r in rows if r["view"] == view and r["cache"] == "cold" and r["backend"] == backend),
                      None) or next(r for r in rows if r["view"] == view and r["cache"] == "cold")
        if cold["result"] != before["result"]:
            raise SystemExit(f"{view} from the records says {cold['result']}, from the objects {before['result']}")
        out.append(cold)
    if backend == "s3":  # the same cold status with the records' index gone: one GET per model again
        from trtfarm.layout_shared import state_index_prefix
        from trtfarm.store import open_store

        store = open_store(uri)
        for key in list(store.list(state_index_prefix())):
            store.delete(key)
        fresh = Path(spec["caches"]) / backend / "recorded-cold-no-index"
        fresh.mkdir(mode=0o700, parents=True)
        cold = in_fork(with_cache(fresh, lambda: timed("status", "cold, recorded, no index", backend,
                                                       named["status"])))
        with_index = next(r for r in out if r["view"] == "status")
        if cold["result"] != with_index["result"]:
            raise SystemExit(f"status without the index says {cold['result']}, with it {with_index['result']}")
        out.append(cold)
    return out


def measured(work: Path, stores: list[tuple[str, str]], fleet_file: Path,
             s3_recorded_only: bool = False) -> list[dict]:
    """``measure`` in a process of its own (this one has built with TensorRT-RTX: no fork from it)."""
    import subprocess

    spec = work / "measure.json"
    spec.write_text(json.dumps({"stores": stores, "fleet": str(fleet_file), "caches": str(work / "caches"),
                                "s3_recorded_only": s3_recorded_only}))
    done = subprocess.run([sys.executable, __file__, "--measure", str(spec)], stdout=subprocess.PIPE, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode:
        raise SystemExit(f"measuring the views failed (exit {done.returncode})")
    return json.loads(done.stdout)


def build_stores(args, work: Path, console, moto_started) -> list[tuple[str, str]]:
    """The synthetic store on each backend asked for; (backend, URI) of each."""
    import yaml

    from trtfarm.project.fleet_file import load_fleet

    fleet_file = work / "gpu_targets.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet_doc()))
    t = time.perf_counter()
    objects = synthetic_objects(args.models, template_manifest(work), load_fleet(fleet_file))
    args.objects = len(objects)
    console.print(f"setup: {len(objects):,} objects for {args.models} models x 20 targets in "
                  f"{time.perf_counter() - t:.1f} s")
    stores = []
    if args.backend in ("both", "file"):
        write_file_store(work / "store", objects)
        stores.append(("file", (work / "store").as_uri()))
    if args.backend in ("both", "s3"):
        from bench._moto import start_moto_bucket

        server = start_moto_bucket("fleet")[0]
        moto_started(server)
        os.environ[MOTO_PID] = str(server.proc.pid)
        t = time.perf_counter()
        write_s3_store("fleet", "farm", objects)
        console.print(f"setup: moto S3 store written in {time.perf_counter() - t:.1f} s")
        stores.append(("s3", "s3://fleet/farm"))
    return stores


def print_rows(console, args, rows: list[dict]) -> None:
    """The table, and each view's answer."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"fleet views: {args.models} models x 20 targets ({os.cpu_count()} cores)",
                  box=box.SIMPLE, pad_edge=False)
    for col in ("view", "cache", "store", "wall s", "CPU s", "moto s", "load", "requests", "GETs"):
        table.add_column(col, justify="left" if col in ("view", "cache", "store") else "right")
    for r in rows:
        table.add_row(r["view"], r["cache"], r["backend"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}",
                      f"{r['moto_cpu_s']:.1f}" if r["backend"] == "s3" else "", f"{r['load']:.1f}",
                      str(r["requests"]), str(r["gets"]))
    console.print(table)
    console.print("cold: a fresh TMPDIR, XDG_CACHE_HOME and TRTFARM_CACHE_DIR; warm: the folder the cold run "
                  "left; each run a fresh fork after the imports. load: the 1-minute load average as the row ran")
    for r in rows:
        if r["cache"] == "warm" and r["backend"] == rows[0]["backend"]:
            console.print(f"{r['view']}: " + ", ".join(f"{n} {k}" for k, n in r["result"].items() if n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--backend", choices=["both", "file", "s3"], default="file",
                        help="s3: moto's server, whose own listing is slow beyond a few thousand keys")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest scale (3 models, both backends): a few seconds, for CI")
    parser.add_argument("--s3-recorded-only", action="store_true",
                        help="on moto's S3 store, only `status --record` and the views that read the records (each "
                             "answer checked against the file store's cold one: use with --backend both)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure.read_text()))))
        return
    if args.smoke:
        args.models, args.backend = 3, "both"
    from rich.console import Console

    console = Console(stderr=args.json)
    servers = []
    with tempfile.TemporaryDirectory(prefix="trtfarm-fleet-views-") as tmp:
        work = Path(tmp)
        try:
            stores = build_stores(args, work, console, servers.append)
            rows = measured(work, stores, work / "gpu_targets.yaml", args.s3_recorded_only)
        finally:
            for server in servers:
                server.stop()
    if args.json:
        print(json.dumps({"models": args.models, "targets": 20, "objects": args.objects, "cores": os.cpu_count(),
                          "rows": rows}, indent=2))
        return
    print_rows(console, args, rows)


if __name__ == "__main__":
    main()
