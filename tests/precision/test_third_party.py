"""Third-party models get fp16 and int8 verdicts: silero-vad (If branches, a rank-0 ``sr``) and a GPT-2 decoder.

- silero-vad, from its PyPI wheel (pinned in ``tests/corpus/sources.py``), gated on held-out data: speech-like
  audio made here (a voiced source at a gliding pitch through three formants, syllable-long bursts and pauses, and
  noise) at 16 kHz in 512-sample windows after 64 of context (the model scores the bursts 0.3-0.4 and the pauses
  about 0.02), its zero state, and ``sr`` a true scalar 16000. fp16 ended in ModelOpt's
  KeyError inside the If branches (``workarounds``, 5).
- GPT-2 with past key values and a 64-row position table, exported by TorchScript and by dynamo (random weights,
  ``tests/corpus/exported.py``), gated on generated inputs: at the usual length past + new tokens (64 + 64) index
  past the table, and the step sizes them down. Its int8 calibration data is generated too; dynamo's additive
  mask holds float32's lowest value, whose histograms ended int8 in "Too many bins" (``workarounds``, 6).

A verdict is passed, failed, or not judged with figures: never a traceback, never "conversion failed".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ..corpus.exported import exported_model
from ..corpus.matrix import calibration_for
from ..corpus.sources import corpus_file

pytestmark = pytest.mark.integration
RATE, WINDOW, CONTEXT = 16000, 512, 64  # silero's own wrapper feeds each window after the last 64 samples


def speech_like(windows: int, seed: int = 0) -> np.ndarray:
    """``windows`` x 576 samples: 512 of voiced bursts (pitch 90-150 Hz, formants 700/1200/2600 Hz) and pauses,
    each after the 64 that came before it, as silero's wrapper feeds the model."""
    rng = np.random.default_rng(seed)
    t = np.arange(windows * WINDOW) / RATE
    pitch = 120 + 30 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    voiced = sum(np.sin(k * phase) * np.exp(-((k * pitch - formant) / 150) ** 2)
                 for k in range(1, 30) for formant in (700, 1200, 2600))
    bursts = (np.sin(2 * np.pi * 2 * t) > 0).astype(float)
    audio = 0.3 * voiced / np.abs(voiced).max() * bursts + 0.01 * rng.standard_normal(t.size)
    padded = np.concatenate([np.zeros(CONTEXT), audio])
    return np.stack([padded[i * WINDOW:(i + 1) * WINDOW + CONTEXT] for i in range(windows)]).astype(np.float32)


def precision(cwd, model, mode: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "precision", str(model), "--mode", mode, "--out",
                           str(cwd / f"{mode}.onnx"), "--json", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in done.stderr and "conversion failed" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 1, 4), f"exit {done.returncode}: {done.stderr[-2000:]}"
    return done, json.loads(done.stdout)


def assert_verdict(done: subprocess.CompletedProcess, doc: dict, outputs: set[str]) -> None:
    """Passed or failed with the exit code that says so, or not judged (exit 4); figures for every output."""
    gate = doc["gate"]
    expected = {"passed": 0, "failed": 1, "not judged": 4}[gate["verdict"]]
    assert done.returncode == expected, (done.returncode, gate["verdict"])
    figures = {f["output"]: f for f in gate["figures"]}
    assert set(figures) == outputs, figures.keys()
    assert all(f["rows"] > 0 and np.isfinite(f["max_error"]) for f in figures.values()), figures


def test_silero_vad_fp16_on_held_out_speech_with_a_scalar_rate_gets_a_verdict(tmp_path):
    model = corpus_file("silero-vad")
    windows = 16
    np.savez(tmp_path / "heldout.npz", input=speech_like(windows), state=np.zeros((2, windows, 128), np.float32),
             sr=np.array(RATE, np.int64))
    done, doc = precision(tmp_path, model, "fp16", "--heldout", str(tmp_path / "heldout.npz"))
    assert_verdict(done, doc, {"output", "stateN"})
    speech = doc["gate"]["figures"][0]
    assert speech["rows"] == windows and speech["scale"] > 0.1  # the model hears the bursts: a real spread
    kept = doc["nodes"]["fp32_nodes"]
    assert any("in the subgraph of If" in why for why in kept.values()), kept  # said, not hidden


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_gpt2_with_past_key_values_gets_fp16_and_int8_verdicts_on_generated_inputs(tmp_path, exporter):
    model = exported_model(f"gpt2short-{exporter}")
    outputs = {"logits", *(f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value"))}
    done, fp16 = precision(tmp_path, model, "fp16")
    assert_verdict(done, fp16, outputs)
    assert any("sized 32, not 64" in n and "position table" in n for n in fp16["notes"]), fp16["notes"]
    calib = calibration_for(model, tmp_path / "calib.npz")
    done, int8 = precision(tmp_path, model, "int8", "--calibration", str(calib))
    assert_verdict(done, int8, outputs)
    assert int8["nodes"]["by_precision"].get("int8", 0) > 0, int8["nodes"]
