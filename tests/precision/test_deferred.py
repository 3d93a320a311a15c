"""lief, which ModelOpt imports and the precision step never calls, is loaded only when something reads it.

Run in a process of its own (``sys.modules`` is the process's, and this one may have lief loaded): each step of
the script below records whether lief is loaded after it, in order, so one import of ModelOpt serves every check.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("lief")  # a dependency of nvidia-modelopt[onnx]

STEPS = """
import inspect, json, sys
from trtfarm.precision.deferred import defer_unused_imports, loaded
said = {}
if sys.argv[1] == "defer":
    defer_unused_imports()
import modelopt.onnx.quantization
import modelopt.onnx.trt_utils as trt_utils
said["import"] = loaded("lief") is not None
said["stand_in"] = type(sys.modules["lief"]).__name__
inspect.getmodule(json.dumps, "/nowhere.py")  # torch's import does this: it reads every module's __file__
said["inspect"] = loaded("lief") is not None
from trtfarm.cli.main import quiet_nanobind_leaks
quiet_nanobind_leaks()
said["quiet"] = loaded("lief") is not None
said["read"] = callable(trt_utils.lief.parse)
said["after_read"] = loaded("lief") is not None
said["replaced"] = type(sys.modules["lief"]).__name__
import lief
said["same"] = lief.parse is trt_utils.lief.parse
print(json.dumps(said))
"""


def _steps(defer: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", STEPS, "defer" if defer else "plain"], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_lief_loads_on_the_first_read_only():
    said = _steps(defer=True)
    assert said["stand_in"] == "DeferredModule"
    assert not said["import"], "importing ModelOpt loaded lief"
    assert not said["inspect"], "inspect.getmodule loaded lief"
    assert not said["quiet"], "quieting nanobind's leak report loaded lief"
    assert said["read"] and said["after_read"], "reading lief.parse did not load it"
    assert said["replaced"] == "module" and said["same"], "the real module did not replace the stand-in"


def test_without_the_stand_in_modelopt_loads_lief():
    """The test above could fail: ModelOpt's own import loads lief when nothing defers it."""
    said = _steps(defer=False)
    assert said["import"] and said["stand_in"] == "module"
