"""``--auto-pin`` that finds no FP32 node set that passes is a failed gate: exit 1 (it was 2, bad input), one line
naming the set it tried last and the gate's figures on it, as README's exit codes say."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from trtfarm.errors import UserInputError
from trtfarm.precision.autopin import AutoPinFailed
from trtfarm.precision.recipe import GateFailed

from ..conftest import write_overflow_model


def test_auto_pin_without_a_passing_set_exits_1_naming_the_set_and_the_figures(tmp_path):
    """The overflowing model needs fc2 and rescale in FP32; no set passes a gate that allows no error at all."""
    model, heldout = write_overflow_model(tmp_path)
    env = {**os.environ, "COLUMNS": "2000"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(model), "--mode", "fp16", "--auto-pin",
                           "--heldout", str(heldout), "--max-error", "0", "--out", str(tmp_path / "p.onnx")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and not done.stdout
    line = " ".join(done.stderr.split())
    found = re.search(r"error: --auto-pin: no FP32 node set passes the fp16 gate: in (\d+) conversion\(s\), the last "
                      r"with 2 node\(s\) kept in FP32 \(fc2, rescale\), the gate still fails: output 'logits' "
                      r"[^;]*\d[^;]* above 0\b", line)
    assert found and int(found.group(1)) >= 3, line  # the naive conversion, then one pin at a time
    assert re.search(r"Fix: keep every node of their op types in FP32 \(--keep-fp32-op \w+( --keep-fp32-op \w+)*\), "
                     r"or use fp32 \(--mode fp32\)$", line), line


def test_a_failed_search_is_a_failed_gate_to_a_build():
    """A build records it as the gate's refusal (``run_precision`` catches ``GateFailed``), not as bad input."""
    assert issubclass(AutoPinFailed, GateFailed) and issubclass(AutoPinFailed, UserInputError)
    assert AutoPinFailed("x").exit_code == 1
