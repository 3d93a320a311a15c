"""The precision step's time on real and large models: `trtfarm precision` fp16 and int8, one process each.

Models: PaddleOCR's detector fixed to a static 1x3x800x608 input (a real detector at the size that took 70-85 s),
the same detector and its recogniser as shipped (dynamic sizes: the sizes the step generates), the model-zoo
DenseNet-121 (1,746 nodes), a 50 MB MLP (12 MatMul layers of 1024x1024 FP32 weights), and corpus exports (a GPT-2
decoder with past key values, the same with a 64-row position table by both exporters, a dynamo ResNet, ddddocr's
detector). int8 calibrates on 32 generated samples. The target: every model up to 50 MB within 10 s wall on the
2-core machine at a load of 1 or less, and within 20 s with a build beside it (a load above 1). Other engineers
load the machine, so each row gives the step's wall time, its CPU time (the process's user + system: what the
step costs, whatever the load) and the load average when it ran. ``--without-workarounds`` runs ModelOpt
without trtfarm's workarounds (trtfarm/precision/workarounds.py), for comparison.

    python bench/precision_speed.py [--models NAME,...] [--without-workarounds]
    python bench/precision_speed.py --smoke     # the smallest scale: the example encoder (0.1 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.corpus.exported import exported_model  # noqa: E402
from tests.corpus.families import family_models  # noqa: E402
from tests.corpus.matrix import calibration_for  # noqa: E402
from tests.corpus.sources import corpus_file  # noqa: E402


def static_detector(out: Path) -> Path:
    model = onnx.load(str(corpus_file("ppocr-det")))
    for d, size in zip(model.graph.input[0].type.tensor_type.shape.dim, (1, 3, 800, 608), strict=True):
        d.Clear()
        d.dim_value = size
    onnx.save(model, str(out))
    return out


def mlp_50mb(out: Path) -> Path:
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(12):
        inits.append(numpy_helper.from_array((rng.standard_normal((1024, 1024)) / 32).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"fc{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"a{i}"], name=f"relu{i}")]
        x = f"a{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1024])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["b", 1024])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(out))
    return out


def model_zoo(name: str):
    return lambda _: next(m.path for m in family_models("onnx-light") if m.name == name)


MODELS = {"ppocr-det-800x608": static_detector, "ppocr-det": lambda _: corpus_file("ppocr-det"),
          "ppocr-rec": lambda _: corpus_file("ppocr-rec"), "densenet121": model_zoo("densenet121"),
          "mlp-50mb": mlp_50mb,
          "gpt2-past-ts": lambda _: exported_model("gpt2-ts"),
          "gpt2-pos64-ts": lambda _: exported_model("gpt2short-ts"),
          "gpt2-pos64-dynamo": lambda _: exported_model("gpt2short-dynamo"),
          "resnet-dynamo": lambda _: exported_model("resnet-dynamo"),
          "ddddocr-det-416": lambda _: corpus_file("ddddocr-det")}


def example_encoder(out: Path) -> Path:
    from examples.encoder import make_model

    out.write_bytes(make_model.encoder_model(0).SerializeToString(deterministic=True))
    return out


SMALLEST = {"encoder": example_encoder}  # run only when named: the smallest scale (the example encoder, 0.1 MB)


def megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.parent.iterdir() if f.name.startswith(path.name)) / 1e6


WITHOUT = ("import functools, trtfarm.precision.step as s; s.convert_and_gate = functools.partial("
           "s.convert_and_gate, workarounds=False); from trtfarm.cli.main import main; main()")
# the same command line with ModelOpt's own functions in the step's process


def precision(path: Path, mode: str, work: Path, without: bool) -> tuple[float, float, dict | str]:
    """(wall seconds, CPU seconds, --json document or the error's last line) of one `trtfarm precision` run."""
    entry = ["-c", WITHOUT] if without else ["-m", "trtfarm"]
    args = [sys.executable, *entry, "precision", str(path), "--mode", mode, "--out",
            str(work / f"{path.stem}-{mode}.onnx"), "--json"]
    if mode == "int8":
        args += ["--calibration", str(calibration_for(path, work / f"{path.stem}-calib.npz"))]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if not done.stdout.strip():
        return seconds, cpu, (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return seconds, cpu, json.loads(done.stdout)


def target(load: float) -> float:
    """The wall seconds a step of a model up to 50 MB may take at this load average: 10 s idle, 20 s beside a build."""
    return 10.0 if load <= 1 else 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--without-workarounds", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="the smallest scale: --models encoder")
    args = parser.parse_args()
    if args.smoke:
        args.models = "encoder"
    named = {**MODELS, **SMALLEST}
    wanted = [m for m in named if m in args.models.split(",")] if args.models else list(MODELS)
    print(f"precision step, {'without' if args.without_workarounds else 'with'} trtfarm's ModelOpt workarounds; "
          "seconds wall / CPU")
    print("| model | MB | nodes | fp16 s | int8 s | load | gate fp16 / int8 |\n|---|---|---|---|---|---|---|")
    slow, reduced = 0, []
    with tempfile.TemporaryDirectory(prefix="trtfarm-precision-speed-") as tmp:
        work = Path(tmp)
        for name in wanted:
            path = named[name](work / f"{name}.onnx")
            nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
            cells, notes, load = [], set(), os.getloadavg()[0]
            for mode in ("fp16", "int8"):
                seconds, cpu, doc = precision(path, mode, work, args.without_workarounds)
                slow += seconds > target(load) and megabytes(path) <= 50
                verdict = doc if isinstance(doc, str) else doc["gate"].get("verdict") or {
                    True: "passed", False: "failed"}.get(doc["gate"]["passed"], "not judged")
                cells.append((seconds, cpu, verdict))
                notes.update(n for n in (doc["notes"] if isinstance(doc, dict) else []) if "samples" in n)
            load = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
            print(f"| {name} | {megabytes(path):.1f} | {nodes} | {cells[0][0]:.1f} / {cells[0][1]:.1f} | "
                  f"{cells[1][0]:.1f} / {cells[1][1]:.1f} | {load} | {cells[0][2]} / {cells[1][2]} |", flush=True)
            reduced += [f"{name}: {n}" for n in sorted(notes)]
    print("\n".join(["", *reduced, f"{os.cpu_count()} cores; {slow} step(s) of a model up to 50 MB over the target "
                                   "(10 s wall at a load of 1 or less, 20 s above)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
