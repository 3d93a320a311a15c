"""The memory budget names the samples it used and those it left out, for held-out and calibration data.

The 4 GiB budget gated a text detector on 2 of 8 held-out samples and did not say which were left out. The result's
notes (in ``--json`` too) now name both, by their indices along the ``.npz``'s batch axis.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from trtfarm.precision import memory
from trtfarm.precision.step import REFERENCE_BATCHES, calibration_feeds, feed_batch, gate_inputs

from .test_memory import wide_audio

SAMPLES = 144_160


@pytest.fixture
def two_fit(tmp_path, monkeypatch):
    """A wide audio model, 8 samples of it in an ``.npz``, and a budget that holds 2 of them (the process's own
    memory taken as the library floor, so the plan does not depend on this test process's peak)."""
    model = tmp_path / "wide.onnx"
    wide_audio(model, channels=16)
    data = tmp_path / "data.npz"
    np.savez(data, audio=np.random.default_rng(0).standard_normal((8, SAMPLES)).astype(np.float32))
    monkeypatch.setattr(memory, "rss_peak", lambda: 0)
    proto = onnx.load(str(model))
    plan = memory.plan_memory(proto, {"audio": [1, SAMPLES]}, 1, 1 << 40, held=REFERENCE_BATCHES * feed_batch(proto))
    return model, data, plan.fixed + plan.per_sample * 5 // 2


def test_held_out_samples_past_the_budget_are_named_with_those_used(two_fit):
    model, data, budget = two_fit
    notes: list[str] = []
    feeds = gate_inputs(model, data, notes, budget)
    assert sum(len(f["audio"]) for f in feeds) == 2
    (note,) = notes
    assert note.startswith("held-out data data.npz: used samples 0-1 of 8, left out 2-7 (indices along its batch "
                           "axis): one sample needs about"), note


def test_calibration_samples_past_the_budget_are_named_with_those_used(two_fit):
    model, data, budget = two_fit
    notes: list[str] = []
    feeds = calibration_feeds(model, data, budget, notes)
    assert sum(len(f["audio"]) for f in feeds) == 2
    assert notes[0].startswith("calibration data data.npz: used samples 0-1 of 8, left out 2-7"), notes


def test_the_json_result_names_the_held_out_samples_the_gate_used_and_left_out(tmp_path):
    model = tmp_path / "wide.onnx"
    wide_audio(model, channels=16)
    np.savez(tmp_path / "heldout.npz",
             audio=np.random.default_rng(0).standard_normal((32, SAMPLES)).astype(np.float32))
    env = {**os.environ, "COLUMNS": "2000"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(model), "--mode", "fp16", "--heldout",
                           str(tmp_path / "heldout.npz"), "--max-memory", "1GiB", "--json", "--out",
                           str(tmp_path / "fp16.onnx")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode in (0, 1, 4) and "Traceback" not in done.stderr, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    (note,) = [n for n in doc["notes"] if n.startswith("held-out data heldout.npz: used samples")]
    used, left = re.match(r"held-out data heldout\.npz: used samples 0-(\d+) of 32, left out (\d+)-31", note).groups()
    assert int(used) + 1 == int(left) and doc["gate"]["figures"][0]["rows"] == int(left), (note, doc["gate"])
