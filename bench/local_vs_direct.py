"""`trtfarm build` against the plain TensorRT-RTX builder calls, on a detector-shaped conv net of a few MB.

Both sides build the same model for the same dynamic image profile and one TensorRT-RTX target, each as a fresh
process (the way a user or a CI job runs them), alternating so machine load hits both alike. trtfarm also checks
and digests the model, writes the plan and its manifest atomically to a fresh store and releases it. Then the
up-to-date rerun and `trtfarm --help`. Goal: median trtfarm <= 1.15 x direct + 1 s; rerun <= 1.5 s; help <= 0.6 s.

    python bench/local_vs_direct.py [--repeat 5] [--width 32] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fleets import ONE_RTX_TARGET  # noqa: E402 - after the repository is on the path

PROFILE = {"image": ((1, 3, 320, 320), (1, 3, 640, 640), (4, 3, 960, 960))}
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
''' % (PROFILE,)


def detector(width: int):
    """The detector-shaped conv net of tests/precision/sigmoid_net.py (a script module, loaded by path)."""
    spec = importlib.util.spec_from_file_location("sigmoid_net", REPO / "tests/precision/sigmoid_net.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.sigmoid_net(width=width)


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--width", type=int, default=32, help="channels of the net (32: about 5.7 MB)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    figures: dict[str, list[float]] = {"direct": [], "trtfarm": [], "up_to_date": [], "help": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = work / "detector" / "model.onnx"
        model.parent.mkdir()
        model.write_bytes(detector(args.width).SerializeToString())
        (work / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
        (work / "direct.py").write_text(DIRECT)
        shape = ":".join("x".join(map(str, s)) for s in PROFILE["image"])
        for i in range(args.repeat):
            figures["direct"].append(timed([sys.executable, "direct.py", str(model), f"direct-{i}.plan"], work))
            farm = [sys.executable, "-m", "trtfarm", "build", str(model), "--profile", f"image={shape}",
                    "--store", f"store-{i}"]
            figures["trtfarm"].append(timed(farm, work))
            figures["up_to_date"].append(timed(farm, work))
            figures["help"].append(timed([sys.executable, "-m", "trtfarm", "--help"], work))
        mib = model.stat().st_size / 2**20
    med = {k: statistics.median(v) for k, v in figures.items()}
    doc = {"model_mib": round(mib, 1), "repeat": args.repeat, "direct_s": round(med["direct"], 3),
           "trtfarm_s": round(med["trtfarm"], 3), "ratio": round(med["trtfarm"] / med["direct"], 3),
           "overhead_s": round(med["trtfarm"] - med["direct"], 3), "up_to_date_s": round(med["up_to_date"], 3),
           "help_s": round(med["help"], 3),
           "goal_met": med["trtfarm"] <= 1.15 * med["direct"] + 1 and med["up_to_date"] <= 1.5 and med["help"] <= 0.6}
    if args.json:
        print(json.dumps(doc))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"detector-shaped conv net, {mib:.1f} MB, image {shape}, one TensorRT-RTX target; "
                        f"{args.repeat} alternating runs, fresh processes")
    for col in ("run", "median s", "min s", "max s", "vs direct"):
        table.add_column(col, justify="right" if col != "run" else "left")
    names = {"direct": "plain TensorRT-RTX builder", "trtfarm": "trtfarm build (fresh store)",
             "up_to_date": "trtfarm build (up to date)", "help": "trtfarm --help"}
    for key, xs in figures.items():
        table.add_row(names[key], f"{med[key]:.2f}", f"{min(xs):.2f}", f"{max(xs):.2f}",
                      f"{med[key] / med['direct']:.2f}x")
    Console().print(table)
    print(f"trtfarm / direct = {doc['ratio']:.2f}x (+{doc['overhead_s']:.2f} s); goal <= 1.15x + 1 s, rerun <= "
          f"1.5 s, help <= 0.6 s: {'met' if doc['goal_met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
