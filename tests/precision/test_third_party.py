"""Third-party models get fp16 and int8 verdicts: silero-vad (If branches, a rank-0 ``sr``) and a GPT-2 decoder.

- silero-vad, every ONNX file of its PyPI wheel (pinned in ``tests/corpus/sources.py``): the If-branched export,
  the 16 kHz opset-15 one, ``silero_vad_half``, the opset-18 one, the OpenVINO one (a batch of 1) and the sequence
  one (LSTM ``h``/``c``), each gated on held-out data: speech-like audio made here (glottal pulses at a gliding
  pitch through the formants of changing vowels, in syllables and pauses, with noise) at 16 kHz in 512-sample
  windows after 64 of context (the model scores syllables up to 0.9-1 and pauses about 0.1, so its decisions at
  0.5 can change), its zero state, and ``sr`` a true scalar 16000 where it takes one. fp16 ended in ModelOpt's
  KeyError inside the If branches (``workarounds``, 5), and on the opset-15 and ``half`` exports in ModelOpt's cast
  of an int64 index its If branches read (``controlflow``: the main graph is converted alone, the Ifs stay FP32,
  and the notes say so). int8, calibrated on the same speech, gets a verdict on each file too: on the three with
  If branches, ModelOpt's quantization fails or writes a model onnxruntime cannot load, and the main graph is
  quantized alone.
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
from pathlib import Path

import numpy as np
import onnx
import pytest

from ..corpus.exported import exported_model
from ..corpus.matrix import calibration_for
from ..corpus.sources import SILERO_VAD, wheel_members

pytestmark = pytest.mark.integration
RATE, WINDOW, CONTEXT = 16000, 512, 64  # silero's own wrapper feeds each window after the last 64 samples


VOWELS = ((730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (660, 1720, 2410))


def _resonance(x: np.ndarray, freq: float, width: float) -> np.ndarray:
    """``x`` through a two-pole resonator at ``freq`` Hz of bandwidth ``width`` Hz (a vocal-tract formant)."""
    r, theta = np.exp(-np.pi * width / RATE), 2 * np.pi * freq / RATE
    a1, a2 = 2 * r * np.cos(theta), -r * r
    y, y1, y2 = np.zeros_like(x), 0.0, 0.0
    for i, v in enumerate(x):
        y[i] = y0 = v + a1 * y1 + a2 * y2
        y2, y1 = y1, y0
    return y


def speech_like(windows: int, seed: int = 0) -> np.ndarray:
    """``windows`` x 576 samples of speech-like audio: each 512 after the 64 that came before it, as silero's
    wrapper feeds the model. Glottal pulses at a gliding pitch (100-195 Hz) through the three formants of a vowel
    that changes every 180 ms, in syllables (250 ms) and pauses, with a little noise: silero scores the syllables
    0.5-1 when it hears them in sequence, 0.1-0.9 window by window, and the pauses about 0.1."""
    rng = np.random.default_rng(seed)
    n = windows * WINDOW
    t = np.arange(n) / RATE
    pitch = 140 + 40 * np.sin(2 * np.pi * 1.3 * t) + 15 * np.sin(2 * np.pi * 5 * t)
    pulses = np.diff(np.floor(np.cumsum(pitch) / RATE), prepend=0)
    source = np.convolve(pulses, np.exp(-np.arange(40) / 8), "same") + 0.02 * rng.standard_normal(n)
    step = int(0.18 * RATE)
    voiced = np.concatenate([sum(_resonance(source[k:k + step], f, w)
                                 for f, w in zip(VOWELS[k // step % len(VOWELS)], (80, 100, 120), strict=True))
                             for k in range(0, n, step)])
    syllables = np.clip(np.sin(2 * np.pi * 2 * t), 0, None) ** 0.5
    audio = 0.5 * voiced / np.abs(voiced).max() * syllables + 0.005 * rng.standard_normal(n)
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


# every ONNX file silero-vad 6.2.3's wheel ships (``test_the_silero_files_are_every_onnx_file_of_its_wheel``)
SILERO_FILES = ("silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_16k_sequence.onnx", "silero_vad_half.onnx",
                "silero_vad_op18_ifless.onnx", "silero_vad_openvino_16k.onnx")
# the exports whose If branches ModelOpt cannot convert: their main graph is converted alone
SILERO_MAIN_GRAPH_ONLY = {"silero_vad_16k_op15.onnx", "silero_vad_half.onnx"}


def silero_files() -> dict[str, Path]:
    return {Path(name).name: path for name, path in wheel_members(SILERO_VAD, "silero_vad/data/").items()}


def heldout_speech(model: onnx.ModelProto, windows: int) -> dict[str, np.ndarray]:
    """Held-out data for any of silero's exports, by its inputs: speech windows (one batch row each, or one
    sequence of them), a zero state (``state`` [2, batch, 128], or ``h``/``c``), and ``sr`` a rank-0 16000.

    An export with a fixed batch of 1 (OpenVINO's) takes one window per run: its data is one window.
    """
    dims = {i.name: [d.dim_value or None for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rows = 1 if dims["input"][0] == 1 else windows
    data = {"input": speech_like(rows)}
    for name, shape in dims.items():
        if name == "sr":
            data[name] = np.array(RATE, np.int64)
        elif name != "input":
            data[name] = np.zeros([rows if d is None else d for d in shape], np.float32)
    return data


def test_the_silero_files_are_every_onnx_file_of_its_wheel():
    assert sorted(silero_files()) == sorted(SILERO_FILES)


@pytest.mark.parametrize("name", SILERO_FILES)
def test_silero_vad_fp16_on_held_out_speech_with_a_scalar_rate_gets_a_verdict(tmp_path, name):
    model = silero_files()[name]
    graph = onnx.load(str(model))
    data = heldout_speech(graph, windows=16)
    np.savez(tmp_path / "heldout.npz", **data)
    done, doc = precision(tmp_path, model, "fp16", "--heldout", str(tmp_path / "heldout.npz"))
    assert_verdict(done, doc, {o.name for o in graph.graph.output})
    # one window (a batch of 1) gives a probability one value: passed, or not judged where no decision can change
    assert doc["gate"]["verdict"] in (("passed",) if len(data["input"]) > 1 else ("passed", "not judged")), doc["gate"]
    speech = doc["gate"]["figures"][0]
    assert speech["rows"] == len(data["input"]) and speech["scale"] > 0.1  # the model hears the bursts
    kept = doc["nodes"]["fp32_nodes"]
    if any(n.op_type == "If" for n in graph.graph.node):
        assert any("in the subgraph of If" in why for why in kept.values()), kept  # said, not hidden
    flow = [n for n in doc["notes"] if "control flow" in n]
    assert bool(flow) == (name in SILERO_MAIN_GRAPH_ONLY), doc["notes"]
    if flow:  # the main graph (the STFT and the encoder's convolutions) runs in FP16, the Ifs in FP32
        assert "its main graph was converted alone" in flow[0] and doc["nodes"]["by_precision"]["fp16"] >= 20
    assert "_subgraph_cast_to_" not in done.stderr


# int8: ModelOpt's quantization fails on the If branches of these (its FP16 pass: "Sanity Check Failed"), or writes
# a model onnxruntime cannot load (an element type that disagrees between an If and its branch): the main graph alone
SILERO_INT8_MAIN_GRAPH_ONLY = {"silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_half.onnx"}


@pytest.mark.parametrize("name", SILERO_FILES)
def test_silero_vad_int8_on_held_out_speech_gets_a_verdict(tmp_path, name):
    model = silero_files()[name]
    graph = onnx.load(str(model))
    np.savez(tmp_path / "speech.npz", **heldout_speech(graph, windows=16))
    done, doc = precision(tmp_path, model, "int8", "--calibration", str(tmp_path / "speech.npz"),
                          "--heldout", str(tmp_path / "speech.npz"))
    assert_verdict(done, doc, {o.name for o in graph.graph.output})
    flow = [n for n in doc["notes"] if "could not int8-convert this model's control flow" in n]
    assert bool(flow) == (name in SILERO_INT8_MAIN_GRAPH_ONLY), doc["notes"]
    if name == "silero_vad.onnx":  # its input [?, ?]: ModelOpt's quantization compares each dimension with 0
        assert any("had neither a size nor a name (input_dim0, input_dim1" in n for n in doc["notes"]), doc["notes"]
        assert "onnxruntime cannot load the model it wrote" in flow[0]


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
