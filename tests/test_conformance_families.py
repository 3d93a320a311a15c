"""The generated families (tests/corpus/families.py): the suite's share of each, every model through every step,
judged as bench/conformance.py judges all of them; and the verdicts issue 45 asked for on two of their models.

The sample (``SUITE_SHARE``, drawn by a digest of each model's name, the same on every run): 1 model of the
model-zoo nets, 8 of 82 PyTorch modules, 6 of 35 PyTorch operators, 12 of 23 small graphs (expand-shape, gradient,
sequence, shrink and string-normaliser graphs), the 3 onnxruntime samples, 2 of 7 TorchScript and 2 of 6 dynamo
transformers exports. Every model of every family: ``python bench/conformance.py``, or this module with
``TRTFARM_CORPUS_SHARE_SCALE=0``.
"""

from __future__ import annotations

import os
import re

import pytest

from .corpus.families import FAMILIES, family_models
from .corpus.openworld import judge, run_family, run_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance-families")


# The suite's share of each generated family (1: every model; 4: a quarter, drawn by a digest of the names), so the
# suite stays within its time; bench/conformance.py runs every model of every family with the same code.
# Measured on the 2-core machine at load 12 (bench/conformance.py): onnx-simple 136 s for all 23 (147 s at load 7;
# the suite runs half since), the PyTorch families 6-9 s a model (3-6 s at load 7; the suite runs a tenth and a
# sixth), a transformers export 40-60 s, a model-zoo net 1-28 min (ModelOpt's cleanup is quadratic in the nodes):
# the model-zoo draw is squeezenet alone, and tests/test_open_world.py converts it too.
SUITE_SHARE = {"onnx-light": 29, "onnx-simple": 2, "onnx-pytorch-converted": 10, "onnx-pytorch-operator": 5,
               "onnxruntime-samples": 1, "transformers-ts": 3, "transformers-dynamo": 3}
SHARE_SCALE = int(os.environ.get("TRTFARM_CORPUS_SHARE_SCALE", "1"))  # 0: every model of every family


@pytest.mark.parametrize("family", sorted(SUITE_SHARE), ids=sorted(SUITE_SHARE))
def test_every_model_of_a_generated_family_gets_a_verdict_from_every_step(family, work):
    assert family in FAMILIES
    share = SUITE_SHARE[family] * SHARE_SCALE
    wrong, seen = {}, 0
    for model, cells, _ in run_family(family, work, share):
        seen += 1
        if problems := judge(cells):
            wrong[model.name] = problems
    assert seen, f"the suite's share of {family} drew no model"
    assert not wrong, wrong


def test_a_failed_int8_gate_names_its_costliest_layers_and_its_auto_pin_answers(work):
    """The bench's share of the verdict, on the suite's model-zoo net, whose int8 gate fails: squeezenet's
    random-weight activations pass FP16's range in FP32, and ModelOpt runs the layers it does not quantize in FP16.
    Run as a user runs it: the step as a real process (nothing after its result), then the ``--auto-pin`` command
    the result suggests."""
    model = next(m for m in family_models("onnx-light") if m.name == "squeezenet")
    cells = run_model(model, work, steps=("ort", "int8"), process=("int8",), pin=True)
    int8 = cells["int8"]
    assert cells["ort"].outcome == "runs" and int8.outcome == "failed", int8
    assert int8.layers[:2] == ["n44", "n46"] and int8.after == "", int8
    assert int8.pin.outcome in ("passed", "no pin set") and re.search(r"\d", int8.pin.detail), int8.pin
    assert not judge(cells), judge(cells)


def test_pytorch_s_sqrt_operator_passes_both_gates_on_inputs_inside_its_domain(work):
    """operator_sqrt failed both gates: half its generated inputs were negative, FP32 gave NaN there, and the gate
    counted the converted model's NaN at the same places as error. Its inputs are now the magnitudes of normal
    values, as a note says, and a NaN in both models would be agreement."""
    model = next(m for m in family_models("onnx-pytorch-operator") if m.name == "operator_sqrt")
    cells = run_model(model, work, steps=("ort", "fp16", "int8"))
    assert cells["fp16"].outcome == cells["int8"].outcome == "passed", cells
    assert not judge(cells), judge(cells)
