"""Precision gate wall time: FP16 and INT8 conversion + accuracy gate of a few-MB conv net on CPU.

The model is tests/precision/sigmoid_net.py's text-detector-shaped conv net (5.5 MB at width 32: strided backbone,
top-down neck, sigmoid probability map), with generated inputs (64 images) for the gate and generated calibration
data (64 images) for INT8. Two input layouts: dynamic height/width (the gate's generated images are then 64 x 64,
and ModelOpt's symbolic shape inference dominates the conversion) and fixed 256 x 256 (the gate's own runs
dominate). Each (layout, mode) runs in a fresh process, as `trtfarm precision` would; the figures are wall and CPU
seconds of ``convert_and_gate`` (conversion + gate) and, separately, of the gate alone on the converted model.

    python bench/precision_gate.py [--width 32] [--sizes 0,256] [--modes fp16,int8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ONE_MODE = """
import json, os, sys, time
from pathlib import Path
import numpy as np, onnx
src, mode, calib = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
from trtfarm.precision.step import Recipe, convert_and_gate, gate_inputs
from trtfarm.precision.gate import accuracy_gate
def clock():
    t = os.times()
    return time.perf_counter(), t.user + t.system
w0, c0 = clock()
recipe = Recipe(mode=mode)
result = convert_and_gate(src, recipe, src.with_name(f"{mode}.onnx"),
                          calibration=calib if mode in ("int8", "fp8") else None)
w1, c1 = clock()
try:  # the gate alone, cold: no session or reference output kept from above
    from trtfarm.precision import runs
    runs._SESSIONS.clear()
    runs._REFERENCE.clear()
    runs._ALL_TENSORS.clear()
except ImportError:  # the gate before sessions were kept
    pass
feeds = gate_inputs(src, None)
w2, c2 = clock()
report = accuracy_gate(src, result.path, feeds, recipe)
w3, c3 = clock()
print(json.dumps({"mode": mode, "passed": result.report.passed, "convert_and_gate_s": round(w1 - w0, 2),
                  "convert_and_gate_cpu_s": round(c1 - c0, 2), "gate_s": round(w3 - w2, 2),
                  "gate_cpu_s": round(c3 - c2, 2), "summary": result.summary(),
                  "figures": [f.__dict__ for f in report.figures]}))
"""


def load_sigmoid_net():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sigmoid_net", REPO / "tests/precision/sigmoid_net.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.sigmoid_net


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=32, help="channels of the first stage (32: 5.5 MB)")
    ap.add_argument("--bias", type=float, default=-11.5, help="logit bias: -11.5 puts the map in FP16 subnormals")
    ap.add_argument("--modes", default="fp16,int8")
    ap.add_argument("--sizes", default="0,256", help="input height = width; 0: dynamic (generated at 64 x 64)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    import numpy as np
    import onnx

    from trtfarm.precision.inputs import generate_inputs

    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        model = load_sigmoid_net()(width=args.width, bias=args.bias, size=size or None)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "model.onnx"
            onnx.save(model, str(src))
            mb = src.stat().st_size / 1e6
            calib = Path(tmp) / "calib.npz"
            np.savez(calib, **generate_inputs(model, samples=64, seed=3))
            for mode in args.modes.split(","):
                load = os.getloadavg()[0]
                proc = subprocess.run([sys.executable, "-c", ONE_MODE, str(src), mode, str(calib)],
                                      capture_output=True, text=True, cwd=REPO)
                if proc.returncode:
                    sys.exit(f"{mode}: failed\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row.update(images=f"{size}x{size}" if size else "64x64 (dynamic dims)",
                           load_avg_1m_before=round(load, 2))
                results.append(row)
    doc = {"model_mb": round(mb, 2), "cpus": os.cpu_count(), "results": results}
    if args.json:
        print(json.dumps(doc))
        return
    print(f"conv net {mb:.1f} MB, {os.cpu_count()} CPUs")
    for r in results:
        print(f"{r['images']} {r['mode']}: convert+gate {r['convert_and_gate_s']:.1f} s wall "
              f"({r['convert_and_gate_cpu_s']:.1f} s CPU); gate alone {r['gate_s']:.1f} s wall "
              f"({r['gate_cpu_s']:.1f} s CPU); 1-min load {r['load_avg_1m_before']:.1f} before; {r['summary']}")


if __name__ == "__main__":
    main()
