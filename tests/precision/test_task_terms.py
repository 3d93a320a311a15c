"""Each output is judged in its task's terms: a probability map by the decisions that change, not its worst pixel.

PP-OCRv4's text detector (from the pinned rapidocr wheel) on pages of rendered text, normalised as PaddleOCR feeds
it, passes FP16 by its decision-flip figure; the same converted model with one convolution's weights scrambled fails.
The unit cases below draw the rules on small arrays.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image, ImageDraw, ImageFont

from tests.corpus.sources import corpus_file
from trtfarm.errors import UserInputError
from trtfarm.precision.figures import figure_failures, output_figures
from trtfarm.precision.gate import accuracy_gate
from trtfarm.precision.output_meaning import OutputMeaning, output_meanings
from trtfarm.precision.recipe import Recipe
from trtfarm.precision.step import convert_and_gate, gate_inputs

WORDS = "invoice total amount date paid order number customer address phone tax shipping item price".split()
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # PaddleOCR's det NormalizeImage


def pages(count: int, size: int = 320, seed: int = 0) -> np.ndarray:
    """``count`` pages of dark text on light paper, as PaddleOCR's detector is fed them: /255, mean/std, NCHW."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        page = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(225, 256, 3)))
        draw = ImageDraw.Draw(page)
        y = int(rng.integers(4, 20))
        while y < size - 30:
            font = ImageFont.load_default(size=int(rng.integers(14, 30)))
            line = " ".join(rng.choice(WORDS, int(rng.integers(2, 5))))
            draw.text((int(rng.integers(4, 60)), y), line, fill=tuple(int(v) for v in rng.integers(0, 70, 3)),
                      font=font)
            y += int(rng.integers(28, 48))
        x = (np.asarray(page, np.float32)[:, :, ::-1] / 255.0 - MEAN) / STD  # BGR, as cv2 reads it
        out.append(x.transpose(2, 0, 1))
    return np.stack(out).astype(np.float32)


@pytest.fixture(scope="module")
def detector_on_pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppocr")
    model = corpus_file("ppocr-det")
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    np.savez(tmp / "heldout.npz", **{name: pages(4)})
    return model, tmp / "heldout.npz", tmp


@pytest.mark.integration
def test_ppocr_det_fp16_on_pages_of_text_passes_by_its_decision_flips_and_a_scrambled_conv_fails(detector_on_pages):
    model, heldout, tmp = detector_on_pages
    output = onnx.load(str(model), load_external_data=False).graph.output[0].name
    recipe = Recipe.model_validate({"mode": "fp16", "thresholds": {"outputs": {output: {"decision_at": [0.3]}}}})
    result = convert_and_gate(model, recipe, tmp / "det16.onnx", heldout=heldout)
    (fig,) = result.report.figures
    assert result.report.verdict == "passed", result.summary()
    assert fig.kind == "probability" and list(fig.flips) == ["0.3"] and fig.flips["0.3"] <= 0.001
    assert fig.quantile_error <= 0.01 and "decisions at 0.3 change on" in result.summary()

    converted = onnx.load(str(result.path))
    tensors = {i.name: i for i in converted.graph.initializer}  # Paddle2ONNX keeps weights in Constant nodes
    tensors |= {n.output[0]: a.t for n in converted.graph.node if n.op_type == "Constant" for a in n.attribute}
    convs = [n for n in converted.graph.node if n.op_type == "Conv" and n.input[1] in tensors]
    weights = tensors[convs[len(convs) // 2].input[1]]  # one convolution halfway down the network
    w = numpy_helper.to_array(weights)
    scrambled = np.random.default_rng(1).permutation(w.reshape(-1)).reshape(w.shape)  # the values, in wrong places
    weights.CopyFrom(numpy_helper.from_array(scrambled.astype(w.dtype), weights.name))
    onnx.save(converted, str(tmp / "broken.onnx"))
    feeds = gate_inputs(model, heldout)
    broken = accuracy_gate(model, tmp / "broken.onnx", feeds, recipe, diagnose=False)
    assert broken.passed is False and any("(probability)" in f for f in broken.failures), broken.failures


def text_lines(count: int, seed: int = 0) -> np.ndarray:
    """Lines of dark text, as PaddleOCR's recogniser is fed them: 48 x 320, (x / 255 - 0.5) / 0.5, NCHW."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        line = Image.new("RGB", (320, 48), (245, 245, 245))
        ImageDraw.Draw(line).text((6, 8), " ".join(rng.choice(WORDS, 3)), fill=(20, 20, 20),
                                  font=ImageFont.load_default(size=26))
        out.append(((np.asarray(line, np.float32)[:, :, ::-1] / 255.0 - 0.5) / 0.5).transpose(2, 0, 1))
    return np.stack(out).astype(np.float32)


@pytest.mark.integration
def test_ppocr_rec_fp16_on_lines_of_text_passes_by_the_character_each_step_picks(tmp_path):
    """Its CTC softmax's largest error (0.03) failed the old rule; CTC decoding reads only each step's arg-max."""
    model = corpus_file("ppocr-rec")
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    np.savez(tmp_path / "heldout.npz", **{name: text_lines(4)})
    result = convert_and_gate(model, Recipe(mode="fp16"), tmp_path / "rec16.onnx", heldout=tmp_path / "heldout.npz")
    (fig,) = result.report.figures
    assert result.report.verdict == "passed", result.summary()
    assert fig.kind == "classes" and fig.extra["top1_agreement"] >= 0.99 and "top1_agreement" in result.summary()


def _map(shape=(2, 1, 100, 100), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < 0.1, rng.uniform(0.8, 1.0, shape), rng.uniform(0.0, 0.05, shape))


def test_one_pixel_far_off_that_crosses_no_threshold_passes_but_one_percent_flipped_fails():
    ref = _map()
    got = ref.copy()
    got.flat[5] = min(ref.flat[5] + 0.09, 1.0) if ref.flat[5] > 0.5 else ref.flat[5] + 0.09  # still on its side
    meaning = output_meanings(_sigmoid_model())["prob"]
    fig = output_figures("prob", ref, got, Recipe(mode="fp16"), (0.0, 1.0), "output of Sigmoid", meaning=meaning)
    assert fig.kind == "probability" and fig.max_error > 0.05 and fig.flips == {"0.5": 0.0}
    assert not figure_failures([fig], Recipe(mode="fp16"))
    flipped = ref.copy()
    idx = np.random.default_rng(2).choice(ref.size, ref.size // 100, replace=False)
    flipped.flat[idx] = 1.0 - flipped.flat[idx]
    bad = output_figures("prob", ref, flipped, Recipe(mode="fp16"), (0.0, 1.0), meaning=meaning)
    failures = figure_failures([bad], Recipe(mode="fp16"))
    assert any("decision at 0.5 changes on" in f for f in failures), failures


def test_the_graphs_own_threshold_is_a_decision_point_and_farm_yaml_sets_them_per_output():
    meaning = output_meanings(_sigmoid_model(cut=0.3))["prob"]
    assert meaning.op == "Sigmoid" and meaning.cuts == (0.3,)
    fig = output_figures("prob", _map(), _map(), Recipe(mode="fp16"), (0.0, 1.0), meaning=meaning)
    assert list(fig.flips) == ["0.3", "0.5"]
    recipe = Recipe.model_validate({"mode": "fp16", "thresholds": {
        "max_error": 0.05, "outputs": {"prob": {"decision_at": [0.7], "flip_share": 0.02}}}})
    t = recipe.gate_thresholds.for_output("prob")
    assert t.decision_at == [0.7] and t.flip_share == 0.02 and t.max_error == 0.05 and t.cosine_mean == 0.9999
    assert recipe.gate_thresholds.for_output("other").flip_share == 0.001
    assert list(output_figures("prob", _map(), _map(), recipe, meaning=meaning).flips) == ["0.7"]


def test_thresholds_for_an_output_the_model_lacks_are_refused_before_the_gate_runs(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_sigmoid_model(), str(path))
    recipe = Recipe.model_validate({"mode": "fp16", "thresholds": {"outputs": {"porb": {"flip_share": 0.1}}}})
    with pytest.raises(UserInputError, match="'porb', not an output of the model; its outputs: prob"):
        accuracy_gate(path, path, [{"x": np.zeros((1, 4), np.float32)}], recipe)


def test_a_softmax_class_map_is_judged_by_its_arg_max_along_the_class_axis():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 5, 8, 8))
    ref = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    meaning = output_meanings(_softmax_model())["seg"]
    assert meaning.op == "Softmax" and meaning.axis == 1
    fig = output_figures("seg", ref, ref + 1e-5, Recipe(mode="fp16"), (0.0, 1.0), meaning=meaning)
    assert fig.kind == "classes" and fig.extra["top1_agreement"] == 1.0
    assert not figure_failures([fig], Recipe(mode="fp16"))
    swapped = ref.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]  # two classes exchanged everywhere
    bad = output_figures("seg", ref, swapped, Recipe(mode="fp16"), (0.0, 1.0), meaning=meaning)
    assert bad.extra["top1_agreement"] < 0.9 and any("top1_agreement" in f for f in
                                                      figure_failures([bad], Recipe(mode="fp16")))


def test_regression_values_are_judged_at_the_quantile_and_a_value_lost_to_inf_still_fails():
    ref = np.random.default_rng(0).standard_normal((8, 1000))
    got = ref * (1 + 1e-4)
    got[:, 0] += 0.2  # 8 values of 8,000 off by 3% of the range: the 99th percentile does not see them
    fig = output_figures("y", ref, got, Recipe(mode="fp16"))
    assert fig.kind == "values" and fig.max_error > 0.01 and fig.quantile_error < 1e-3
    assert not figure_failures([fig], Recipe(mode="fp16"))
    strict = Recipe.model_validate({"mode": "fp16", "thresholds": {"error_quantile": 1.0}})
    assert figure_failures([output_figures("y", ref, got, strict)], strict)  # quantile 1: the largest decides
    got[3, 7] = np.inf
    assert any("max error inf" in f for f in figure_failures([output_figures("y", ref, got, Recipe(mode="fp16"))],
                                                              Recipe(mode="fp16")))


def _sigmoid_model(cut: float | None = None) -> onnx.ModelProto:
    n = helper.make_node
    nodes = [n("Sigmoid", ["x"], ["prob"], name="sig")]
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["b", 4])]
    inits = []
    if cut is not None:
        inits.append(numpy_helper.from_array(np.array(cut, np.float32), "cut"))
        nodes.append(n("Greater", ["prob", "cut"], ["mask"], name="thresh"))
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, ["b", 4]))
    graph = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _softmax_model() -> onnx.ModelProto:
    node = helper.make_node("Softmax", ["x"], ["seg"], name="sm", axis=1)
    graph = helper.make_graph([node], "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 5, 8, 8])],
                              [helper.make_tensor_value_info("seg", TensorProto.FLOAT, ["b", 5, 8, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_map_or_class_output_with_one_decision_everywhere_is_not_judged():
    from trtfarm.precision.gate import GateReport

    faint = _map() * 0.1  # every value below 0.5: a detector that finds nothing on these inputs
    meaning = output_meanings(_sigmoid_model())["prob"]
    fig = output_figures("prob", faint, faint + 1e-4, Recipe(mode="fp16"), (0.0, 1.0), meaning=meaning)
    assert "every FP32 value lies on one side of 0.5" in fig.uninformative
    report = GateReport("fp16", not figure_failures([fig], Recipe(mode="fp16")), {}, [fig])
    assert report.verdict == "not judged" and "'prob'" in report.note
    blank = np.zeros((4, 20, 30))
    blank[..., 0] = np.random.default_rng(0).uniform(0.6, 1.0, (4, 20))  # a CTC recogniser reading blank at
    blank[..., 1] = 1.0 - blank[..., 0]  # every step of noise
    seg = output_figures("seg", blank, blank, Recipe(mode="fp16"), (0.0, 1.0),
                         meaning=OutputMeaning("Softmax", -1))
    assert seg.extra["top1_agreement"] == 1.0 and "FP32 picks class 0 at every position" in seg.uninformative
    broken = blank.copy()
    broken[0, :5, 0], broken[0, :5, 3] = 0.0, 1.0  # a decision that changes is still a failure
    assert figure_failures([output_figures("seg", blank, broken, Recipe(mode="fp16"), (0.0, 1.0),
                                           meaning=OutputMeaning("Softmax", -1))], Recipe(mode="fp16"))
