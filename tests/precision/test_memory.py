"""The precision step keeps within its memory budget (``--max-memory``), or refuses in one line when it cannot.

An audio model takes 144,160 samples per input and widens them to 16 and more channels: one sample's activations
are tens of MiB, so the 64 samples the gate generates by default would not fit a small budget. The step's peak
resident memory is measured as the operating system saw it, in a process of its own.
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
from onnx import TensorProto, helper, numpy_helper

from ..fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration

BUDGET = 1 << 30
# runs the command and prints its peak resident memory (KiB) last on stderr
PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")


def wide_audio(path, channels: int, samples: int = 144_160) -> None:
    """``audio`` [batch, samples] -> two 1x1 Conv + Relu layers of ``channels`` -> mean over time [batch, channels]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(rng.standard_normal((channels, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((channels, channels, 1)) / channels ** 0.5)
                                     .astype(np.float32), "w2")]
    n = helper.make_node
    nodes = [n("Unsqueeze", ["audio", "one"], ["a"], name="lift"), n("Conv", ["a", "w1"], ["c1"], name="conv1"),
             n("Relu", ["c1"], ["r1"], name="relu1"), n("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             n("Relu", ["c2"], ["r2"], name="relu2"),
             n("ReduceMean", ["r2"], ["emb"], name="pool", axes=[2], keepdims=0)]
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", samples])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["batch", channels])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def precision(tmp_path, model, *args) -> tuple[subprocess.CompletedProcess, int]:
    """``trtfarm precision MODEL --mode fp16 ARGS`` in a process of its own: the result and its peak RSS (bytes)."""
    env = {**os.environ, "COLUMNS": "2000"}
    proc = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "trtfarm", "precision", str(model),
                           "--mode", "fp16", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    *said, peak = proc.stderr.strip().splitlines()
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, "\n".join(said)), int(peak) * 1024


def test_the_step_gates_as_many_samples_as_the_budget_holds_and_stays_under_it(tmp_path):
    wide_audio(tmp_path / "wide.onnx", channels=16)
    proc, peak = precision(tmp_path, tmp_path / "wide.onnx", "--max-memory", "1GiB", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["gate"]["verdict"] == "passed"
    (note,) = [n for n in doc["notes"] if n.startswith("generated ")]
    count = int(note.split()[1])
    assert 2 <= count < 64 and "1 GiB budget" in note, note
    assert doc["gate"]["figures"][0]["rows"] == count
    assert peak < BUDGET, f"peak RSS {peak / 2**20:.0f} MiB over the 1 GiB budget"


def test_a_model_of_which_one_sample_does_not_fit_is_refused_in_one_line_before_any_run(tmp_path):
    wide_audio(tmp_path / "huge.onnx", channels=2048)  # one sample: 2048 x 144,160 floats a layer, over 1 GiB each
    proc, peak = precision(tmp_path, tmp_path / "huge.onnx", "--max-memory", "1GiB")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "not even one sample fits the memory budget" in line and "Fix: --max-memory" in line
    assert "the largest tensor is 'c1' (1.1 GiB a sample)" in line  # the first of the widest, in graph order
    assert "Traceback" not in proc.stderr and peak < BUDGET / 2  # refused before anything large was allocated
    assert not (tmp_path / "huge_fp16.onnx").exists()

    bad, _ = precision(tmp_path, tmp_path / "huge.onnx", "--max-memory", "lots")
    assert bad.returncode == 2 and "--max-memory 'lots': give a size such as 4GiB" in bad.stderr


def test_build_with_a_precision_takes_the_same_budget_and_refuses_the_same_line(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    wide_audio(tmp_path / "huge.onnx", channels=2048)
    env = {**os.environ, "COLUMNS": "2000"}
    step, _ = precision(tmp_path, tmp_path / "huge.onnx", "--max-memory", "1GiB")
    build = subprocess.run([sys.executable, "-m", "trtfarm", "build", "huge.onnx", "--precision", "fp16",
                            "--max-memory", "1GiB", "--profile", "audio=1x144160:1x144160:1x144160", "--store",
                            str(tmp_path / "store")], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 2, build.stdout + build.stderr
    (line,) = build.stderr.strip().splitlines()
    assert "not even one sample fits the memory budget" in line and "of the 1 GiB budget" in line
    # the precision command's own fix; the budget it suggests is sized from this process's measured memory, which
    # differs from one process to the next by a GiB or so
    fixes = [re.sub(r"--max-memory [0-9.]+GiB", "--max-memory SIZE", t.split("Fix: ")[1])
             for t in (line, step.stderr.strip())]
    assert fixes[0] == fixes[1] and "--max-memory SIZE" in fixes[0], fixes
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.plan"))
    bad = subprocess.run([sys.executable, "-m", "trtfarm", "build", "huge.onnx", "--precision", "fp16",
                          "--max-memory", "lots"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "--max-memory 'lots': give a size such as 4GiB" in bad.stderr


def test_the_budget_counts_the_step_s_own_peak_not_the_peak_of_the_process_that_started_it(tmp_path):
    """A parent holding 1 GiB (a farm worker, a notebook) starts the step: fork and exec hand the child the parent's
    peak in ``ru_maxrss``, so a step that counted it refused models that fit, as the conformance bench's did."""
    child = ("import resource; from trtfarm.precision.memory import rss_peak; "
             "print(rss_peak(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    parent = ("import subprocess, sys; held = bytearray(1 << 30); held[::4096] = b'x' * len(held[::4096]); "
              f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout)")
    own, inherited = map(int, subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                                             check=True, timeout=120).stdout.split())
    assert inherited > 1 << 30  # what ru_maxrss says in the child: the parent's gigabyte
    assert own < 512 << 20, own  # the child's own address space: Python with trtfarm's memory module


def dense_blocks(path, layers: int = 64, growth: int = 8, side: int = 8, classes: int = 1000) -> None:
    """A DenseNet as the ONNX test zoo writes it: IR 3, every initializer a graph input, the weights made by
    ``ConstantOfShape``, a 1x1 scale read through ``Unsqueeze`` of an 8-value weight, and ``layers`` layers each
    concatenating ``growth`` new channels (Mul, Relu, Conv, Concat) onto all before; static batch 1."""
    n, inits, made = helper.make_node, [], []

    def weight(name: str, shape: list[int]) -> str:  # as the light zoo nets: ConstantOfShape of a shape input
        inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"{name}__SHAPE"))
        made.append(n("ConstantOfShape", [f"{name}__SHAPE"], [name],
                      value=numpy_helper.from_array(np.array([0.02], np.float32))))
        return name

    inits.append(numpy_helper.from_array(np.ones(growth, np.float32), "scale"))
    nodes = [n("Unsqueeze", ["scale"], ["scale_hw"], axes=[1, 2]), n("Mul", ["x", "scale_hw"], ["h0"])]
    for k in range(layers):
        width = growth * (k + 1)
        nodes += [n("Relu", [f"h{k}"], [f"r{k}"]), n("Mul", [f"r{k}", "scale_hw"] if k == 0 else [f"r{k}", "half"],
                                                      [f"m{k}"]),
                  n("Conv", [f"m{k}", weight(f"w{k}", [growth, width, 3, 3])], [f"c{k}"], pads=[1, 1, 1, 1]),
                  n("Concat", [f"h{k}", f"c{k}"], [f"h{k + 1}"], axis=1)]
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
    nodes += [n("GlobalAveragePool", [f"h{layers}"], ["pool"]), n("Flatten", ["pool"], ["flat"]),
              n("MatMul", ["flat", weight("fc", [growth * (layers + 1), classes])], ["logits"])]
    graph = helper.make_graph(
        made + nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, growth, side, side])] +
        [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def test_an_ir3_densenet_is_sized_by_its_real_tensors_and_gated_on_every_sample_within_the_budget(tmp_path,
                                                                                                  monkeypatch):
    """The test zoo's densenet121 was refused (5.2 GiB a sample against 4 GiB): its IR-3 small weights hid every
    shape after them, each counted as the largest weight, and every sample's activations counted as held at once,
    though AutoCast's reference run holds its first batches only. Such a net now gets a verdict, under the budget."""
    from trtfarm.precision import memory
    from trtfarm.precision.memory import plan_memory, size_text, tensor_bytes

    dense_blocks(tmp_path / "dense.onnx", side=16)
    proc, peak = precision(tmp_path, tmp_path / "dense.onnx", "--max-memory", "1GiB", "--json")
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr  # passed, or not judged (exit 4): a verdict
    doc = json.loads(proc.stdout)
    assert doc["gate"]["verdict"] in ("passed", "not judged") and doc["gate"]["figures"][0]["rows"] == 8
    assert not [n for n in doc["notes"] if "budget" in n]  # all 8 samples a static batch-1 export gets
    assert peak < BUDGET, f"peak RSS {peak / 2**20:.0f} MiB over the 1 GiB budget"

    model = onnx.load(str(tmp_path / "dense.onnx"))
    acts, outs, largest = tensor_bytes(model, {"x": [1, 8, 16, 16]})
    # every activation known: per layer Relu and Mul of the w = 8(k+1) channels before, Conv's 8 and Concat's w + 8,
    # at 16 x 16; the first Mul's 8; then the pool, its flattening (520 each) and the 1000 logits
    real = 4 * 256 * (8 + sum(3 * 8 * (k + 1) + 16 for k in range(64))) + 4 * (520 + 520 + 1000)
    # and the weights ConstantOfShape makes (the 1x1 scale, the Conv kernels, the classifier), never the largest
    made = 4 * (8 + sum(8 * 8 * (k + 1) * 9 for k in range(64)) + 8 * 65 * 1000)
    assert acts == real + made and outs == 4000 and largest == f"'h64' ({size_text(4 * 256 * 8 * 65)} a sample)"
    # about 50 MiB a sample: held for every sample, only 5 would fit; AutoCast holds the first 4 batches' only
    monkeypatch.setattr(memory, "rss_peak", lambda: 0)  # the plan as a fresh process makes it, not this one's
    assert plan_memory(model, {"x": [1, 8, 16, 16]}, 1, BUDGET).samples < 8
    assert plan_memory(model, {"x": [1, 8, 16, 16]}, 1, BUDGET, held=4).samples >= 8
