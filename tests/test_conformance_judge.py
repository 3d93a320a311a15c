"""The conformance judge accepts a refusal only for a reason a user can act on, never for a path that holds "onnx".

Every model's path names onnx (``.../onnx/backend/test/data/...``, ``model.onnx``): a judge that looked for the
word anywhere counted every refusal as naming the library. The reason must be in the sentence, as the step's own
messages phrase it.
"""

from __future__ import annotations

import pytest

from tests.corpus.openworld import Cell, judge, refusal_reason

PATH = "/cache/members/onnx-1.23.2/onnx+backend+test+data/simple/test_sequence_model4/model.onnx"


@pytest.mark.parametrize("detail", [
    f"{PATH}: cannot read the model",
    f"{PATH}: fp16 conversion went wrong (KeyError at modelopt/onnx/autocast/precisionconverter.py:1092: 'x')",
    "C:\\models\\onnx\\model.onnx: no reason",
])
def test_a_refusal_whose_only_library_word_is_in_a_path_is_judged_wrong(detail):
    assert refusal_reason(detail) == ""
    wrong = judge({"ort": Cell("runs"), "fp16": Cell("refused", detail), "int8": Cell("passed")})
    assert wrong and wrong[0].startswith("fp16 refused without a verdict or a library's reason"), wrong


@pytest.mark.parametrize(("detail", "reason"), [
    (f"{PATH}: fp16 conversion failed in ModelOpt (PolygraphyException at polygraphy/logger/logger.py:627: x). "
     "Fix: keep this model fp32", "failed in ModelOpt"),
    (f"{PATH}: fp16 conversion stopped in ModelOpt's run of the FP32 model on the generated inputs: onnxruntime "
     "refused it (x)", "stopped in ModelOpt"),
    (f"{PATH}: the model has ai.onnx.ml operators (LinearClassifier x1), which ModelOpt cannot fp16-convert",
     "ModelOpt cannot"),
    (f"{PATH}: onnxruntime cannot run the model on generated inputs (x). Fix: pass real inputs: --heldout h.npz",
     "onnxruntime cannot"),
    (f"{PATH}: not even one sample fits the memory budget: 5.2 GiB a sample", "fits the memory budget"),
])
def test_a_refusal_that_says_who_refused_or_what_it_needs_is_a_reason(detail, reason):
    assert refusal_reason(detail) == reason
    assert not judge({"ort": Cell("runs"), "fp16": Cell("refused", detail), "int8": Cell("passed")})
