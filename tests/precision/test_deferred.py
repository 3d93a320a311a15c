"""lief and torch, which ModelOpt imports and the precision step never calls, are loaded only when something reads
them; Polygraphy's torch question imports no torch while a step runs.

Run in a process of its own (``sys.modules`` is the process's, and this one may have torch loaded): each step of
the script below records what is loaded after it, in order, so one import of ModelOpt serves every check.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# a dependency of nvidia-modelopt[onnx]; asked without importing it into the suite's process
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lief") is None, reason="lief is not installed")

STEPS = """
import inspect, json, sys
import numpy as np
from trtfarm.precision.deferred import import_modelopt, loaded, torch_unasked
said = {}
def now():
    return {name: name in sys.modules for name in ("lief", "torch")}
if sys.argv[1] == "defer":
    import_modelopt()
else:
    import modelopt.onnx.quantization, modelopt.onnx.autocast
said["import"] = now()
import modelopt.onnx.trt_utils as trt_utils
import modelopt.onnx.quantization.qdq_utils as qdq_utils
said["stand_ins"] = [type(trt_utils.lief).__name__, type(qdq_utils.torch).__name__]
inspect.getmodule(json.dumps, "/nowhere.py")  # torch's import does this: it reads every module's __file__
said["inspect"] = now()
from trtfarm.cli.main import quiet_nanobind_leaks
quiet_nanobind_leaks()
said["quiet"] = now()
from polygraphy.util import array
polygraphys = array.is_torch
with torch_unasked():
    said["asked"] = [array.is_torch(np.zeros(2)), array.is_torch([1.0])]
said["asked_after"] = now()
said["put_back"] = array.is_torch is polygraphys
said["lief_read"] = callable(trt_utils.lief.parse)
said["fp8"] = qdq_utils._cast_fp8(np.array([1.0, -2.0, 500.0], dtype=np.float32)).tolist()
said["read"] = now()
said["replaced"] = [type(sys.modules[name]).__name__ for name in ("lief", "torch")]
import lief, torch.nn
said["same"] = [lief.parse is trt_utils.lief.parse, torch.nn is qdq_utils.torch.nn]
with torch_unasked():
    said["asked_loaded"] = [array.is_torch(torch.zeros(2)), array.is_torch(np.zeros(2))]
print(json.dumps(said))
"""

NO = {"lief": False, "torch": False}


def _steps(defer: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", STEPS, "defer" if defer else "plain"], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_lief_and_torch_load_on_the_first_read_only():
    said = _steps(defer=True)
    assert said["import"] == NO, "importing ModelOpt loaded them (or left a stand-in in sys.modules)"
    assert said["stand_ins"] == ["DeferredModule", "DeferredModule"]
    assert said["inspect"] == NO, "inspect.getmodule loaded them"
    assert said["quiet"] == NO, "quieting nanobind's leak report loaded them"
    assert said["asked"] == [False, False] and said["asked_after"] == NO, "Polygraphy's question imported torch"
    assert said["put_back"], "Polygraphy's is_torch was not put back after the block"
    # FP8 E4M3 bytes of 1, -2 and 448 (500 saturated): what torch.float8_e4m3fn writes
    assert said["lief_read"] and said["fp8"] == [0x38, 0xC0, 0x7E], "a read through a stand-in did not load it"
    assert said["read"] == {"lief": True, "torch": True}
    assert said["replaced"] == ["module", "module"] and said["same"] == [True, True], \
        "the real modules did not replace the stand-ins, or a submodule import after them got another torch"
    assert said["asked_loaded"] == [True, False], "with torch loaded, the question is torch's own"


def test_without_the_stand_ins_modelopt_loads_lief_and_torch():
    """The test above could fail: ModelOpt's own import loads both when nothing defers them."""
    said = _steps(defer=False)
    assert said["import"] == {"lief": True, "torch": True} and said["stand_ins"] == ["module", "module"]


STEP = """
import sys
from pathlib import Path
from trtfarm.precision.step import Recipe, _isolated_step
src, calib, out = map(Path, sys.argv[1:])
for mode in ("fp16", "int8"):
    _isolated_step(src, Recipe(mode=mode), out / f"{mode}.onnx", calibration=calib, heldout=None,
                   max_memory=4 << 30, workarounds=True)
print("torch" in sys.modules, "lief" in sys.modules)
"""


def test_a_precision_step_never_loads_torch_or_lief(example_onnx, encoder_calib, tmp_path):
    """fp16 (AutoCast and its Polygraphy reference run) and int8 (calibration), each gated through Polygraphy.

    What the step's own process runs (``convert_and_gate`` starts one: ``child``), here in the script's process.
    """
    done = subprocess.run([sys.executable, "-c", STEP, str(example_onnx), str(encoder_calib), str(tmp_path)],
                          capture_output=True, text=True, check=True, cwd=str(Path(__file__).resolve().parents[2]),
                          timeout=600)
    assert done.stdout.split()[-2:] == ["False", "False"], done.stdout[-2000:]
