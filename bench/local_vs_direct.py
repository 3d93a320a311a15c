"""trtfarm's local mode against the plain build script it replaces, on the same model, targets and toolchain.

The direct script runs one build per target: parse, profiles, build, write the plan. That is what a team writes
before it has a farm. trtfarm builds once per compatibility class and publishes plan + manifest. Run it twice: the
second run is the up-to-date check. Both sides run as fresh processes, the way a user or CI job runs them.

    python bench/local_vs_direct.py [--model examples/encoder/model.onnx] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
PROFILE = {"input_ids": ((1, 16), (16, 128), (32, 512)), "attention_mask": ((1, 16), (16, 128), (32, 512))}

DIRECT = '''
import sys, tensorrt_rtx as trt
onnx_path, out_dir, targets = sys.argv[1], sys.argv[2], sys.argv[3:]
logger = trt.Logger(trt.Logger.WARNING)
for target in targets:  # the plain script: one full build per target
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
    with open(f"{out_dir}/{target}.plan", "wb") as f:
        f.write(plan)
''' % (PROFILE,)


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=REPO / "examples/encoder/model.onnx")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not args.model.exists():
        subprocess.run([sys.executable, str(REPO / "examples/encoder/make_model.py"), "--out", str(args.model)],
                       check=True)
    import yaml

    fleet = yaml.safe_load((REPO / "gpu_targets.yaml").read_text())
    rtx = [t["id"] for t in fleet["targets"] if fleet["toolchains"][t["toolchain"]]["flavour"] == "tensorrt_rtx"]
    figures: dict[str, list[float]] = {"direct script": [], "trtfarm build (fresh store)": [],
                                       "trtfarm build (up to date)": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            shutil.copy(REPO / "gpu_targets.yaml", work)
            (work / "direct.py").write_text(DIRECT)
            figures["direct script"].append(timed([sys.executable, "direct.py", str(args.model), tmp, *rtx], work))
            shapes = [f"{n}={':'.join('x'.join(map(str, s)) for s in r)}" for n, r in PROFILE.items()]
            farm = [sys.executable, "-m", "trtfarm", "build", str(args.model),
                    *[a for t in rtx for a in ("--target", t)], *[a for s in shapes for a in ("--profile", s)]]
            figures["trtfarm build (fresh store)"].append(timed(farm, work))
            figures["trtfarm build (up to date)"].append(timed(farm, work))
    base = statistics.median(figures["direct script"])
    table = Table(title=f"{args.model.name}: {len(rtx)} TensorRT-RTX targets ({', '.join(rtx)}), "
                        f"{args.repeat} runs, median wall time")
    for col in ("run", "median s", "min s", "max s", "vs direct"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for name, xs in figures.items():
        med = statistics.median(xs)
        table.add_row(name, f"{med:.2f}", f"{min(xs):.2f}", f"{max(xs):.2f}", f"{med / base:.2f}x")
    Console().print(table)
    print("trtfarm's run includes starting Prefect's ephemeral API, digests, the manifest and the publish; "
          "it builds once per compatibility class where the direct script builds once per target.")


if __name__ == "__main__":
    main()
