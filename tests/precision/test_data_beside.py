"""`trtfarm precision` finds calib.npz and heldout.npz beside the model, as `build` does (and as its errors say)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from .sigmoid_net import sigmoid_net

pytestmark = pytest.mark.integration


def test_heldout_beside_the_model_is_used_and_said(tmp_path):
    model = tmp_path / "model.onnx"
    net = sigmoid_net(width=8, bias=0.0)
    onnx.save(net, str(model))
    name = net.graph.input[0].name
    dims = [d.dim_value or 3 for d in net.graph.input[0].type.tensor_type.shape.dim]
    np.savez(tmp_path / "heldout.npz", **{name: np.random.default_rng(0).standard_normal(dims).astype(np.float32)})
    done = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(model), "--mode", "fp16", "--json"],
                          cwd=tmp_path, env={**os.environ, "COLUMNS": "80"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode in (0, 1, 4) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"using {tmp_path / 'heldout.npz'} (beside the model)" in done.stderr, done.stderr  # one line
    rows = json.loads(done.stdout)["gate"]["figures"][0]["rows"]
    assert rows == dims[0]  # the held-out samples, not 64 generated ones
