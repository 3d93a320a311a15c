"""The gate's verdict on real models: error against the output's scale, cosine where the reference has signal."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtfarm.precision import runs as gate_runs
from trtfarm.precision.figures import figure_failures, output_figures
from trtfarm.precision.gate import GateReport, accuracy_gate
from trtfarm.precision.output_meaning import output_ranges
from trtfarm.precision.progress import precision_progress
from trtfarm.precision.step import Recipe, convert_and_gate

from .sigmoid_net import sigmoid_net


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """A conv net whose output is a sigmoid map of about 1e-7 on random inputs (FP16 subnormals)."""
    path = tmp_path_factory.mktemp("detector") / "model.onnx"
    onnx.save(sigmoid_net(width=8, bias=-16.0), str(path))
    return path


@pytest.mark.integration
def test_fp16_of_a_sigmoid_map_is_not_judged_on_generated_inputs_that_carry_no_signal(detector, tmp_path):
    result = convert_and_gate(detector, Recipe(mode="fp16"), tmp_path / "fp16.onnx")
    (fig,) = result.report.figures
    assert fig.cosine_min < 0.999  # cosine over all samples: what refused this model before, on rounding noise
    assert result.report.passed is None and result.report.verdict == "not judged"  # neither refused nor passed
    assert fig.scale == 1.0 and fig.scale_from == "output of Sigmoid"
    assert fig.max_error < 1e-5 and fig.signal_rows == 0 and fig.cosine_signal_mean is None
    assert "uninformative" in result.report.warnings[0] and "heldout.npz" in result.summary()
    assert result.report.diverging_nodes == []


@pytest.mark.integration
def test_with_signal_cosine_is_judged_and_the_error_threshold_comes_from_the_recipe(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(sigmoid_net(width=8, bias=0.0), str(path))  # a map around 0.5: every sample carries signal
    result = convert_and_gate(path, Recipe(mode="fp16"), tmp_path / "fp16.onnx")
    (fig,) = result.report.figures
    assert result.report.passed and result.report.warnings == []
    assert fig.signal_rows == fig.rows == 64 and fig.cosine_signal_min > 0.9999
    strict = Recipe.model_validate({"mode": "fp16", "thresholds": {"max_error": 1e-6}})  # as farm.yaml writes it
    assert strict.gate_thresholds.cosine_mean == 0.9999  # fields left out keep the mode's defaults
    assert not [k for k in gate_runs._ALL_TENSORS if k[0] == gate_runs.model_key(path)]
    report = accuracy_gate(path, result.path, gate_runs_feeds(path), strict)
    assert report.passed is False and "of its scale 1 (output of Sigmoid) at the 99th percentile" in report.failures[0]
    # the layer-wise search (every tensor of both models) runs only now that the gate fails
    assert [k for k in gate_runs._ALL_TENSORS if k[0] == gate_runs.model_key(path)]


def gate_runs_feeds(path):
    from trtfarm.precision.step import gate_inputs

    return gate_inputs(path, None)


@pytest.mark.integration
def test_the_fp32_session_and_outputs_are_reused_across_modes(detector, tmp_path):
    """In one process (a step's own, where auto-pin gates attempt after attempt), the FP32 model's session and
    outputs are computed once and kept; the converted models' sessions are not."""
    feeds = gate_runs_feeds(detector)
    fp16 = convert_and_gate(detector, Recipe(mode="fp16"), tmp_path / "fp16.onnx")  # each in a process of its own
    calib = tmp_path / "calib.npz"
    np.savez(calib, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    int8 = convert_and_gate(detector, Recipe(mode="int8"), tmp_path / "int8.onnx", calibration=calib)
    assert fp16.report.verdict == "not judged" and int8.report.verdict != "not verified"  # both ran the numerics
    gate_runs._SESSIONS.clear()
    gate_runs._REFERENCE.clear()
    gate_runs._ALL_TENSORS.clear()
    accuracy_gate(detector, fp16.path, feeds, Recipe(mode="fp16"))
    key = (gate_runs.model_key(detector), ())
    first = gate_runs._SESSIONS[key]
    outputs = gate_runs._REFERENCE[(gate_runs.model_key(detector), gate_runs.feeds_key(feeds))]
    accuracy_gate(detector, int8.path, feeds, Recipe(mode="int8"))
    assert gate_runs._SESSIONS[key] is first
    assert gate_runs._REFERENCE[(gate_runs.model_key(detector), gate_runs.feeds_key(feeds))] is outputs
    assert not gate_runs._ALL_TENSORS  # no layer-wise run for a gate that refuses nothing
    assert list(gate_runs._SESSIONS) == [key]  # only the FP32 model's session is kept


def test_declared_output_ranges_set_the_scale():
    ref = np.full((4, 10), 1e-4)
    got = ref + 1e-5
    fig = output_figures("prob", ref, got, Recipe(mode="fp16", output_ranges={"prob": [0, 1e-3]}))
    assert fig.scale == pytest.approx(1e-3) and fig.scale_from == "declared in the recipe"
    assert fig.max_error == pytest.approx(1e-2)
    assert not figure_failures([fig], Recipe(mode="fp16", output_ranges={"prob": [0, 1e-3]}))  # 1%: at the limit
    assert figure_failures([output_figures("prob", ref, got, Recipe(mode="fp16", output_ranges={"prob": [0, 5e-4]}))],
                           Recipe(mode="fp16"))  # 2% of a narrower declared range
    assert not figure_failures([output_figures("prob", ref, got, Recipe(mode="fp16"), (0.0, 1.0))],
                               Recipe(mode="fp16"))


def test_cosine_is_judged_only_on_rows_with_signal_and_a_wrong_signal_row_fails():
    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.uniform(0, 1, (3, 50)), np.full((5, 50), 1e-6)])
    got = ref.copy()
    got[3:] += rng.uniform(-1e-6, 1e-6, (5, 50))  # noise on near-zero rows: cosine there is meaningless
    fig = output_figures("y", ref, got, Recipe(mode="fp16"), (0.0, 1.0))
    assert fig.signal_rows == 3 and fig.cosine_min < 0.99 and fig.cosine_signal_min == pytest.approx(1.0)
    assert not figure_failures([fig], Recipe(mode="fp16"))
    got[0, :25] = ref[0, 25:]  # a real error on a row with signal
    failures = figure_failures([output_figures("y", ref, got, Recipe(mode="fp16"), (0.0, 1.0))], Recipe(mode="fp16"))
    assert any("99th percentile" in f for f in failures)
    assert any("over the 3 of 8 samples with signal" in f for f in failures)


def test_non_finite_outputs_fail_and_a_constant_reference_is_uninformative():
    ref = np.ones((4, 6))
    got = ref.copy()
    got[1, 2] = np.inf
    fig = output_figures("y", ref, got, Recipe(mode="fp16"))
    assert fig.max_error == np.inf and figure_failures([fig], Recipe(mode="fp16"))
    constant = output_figures("y", ref, ref, Recipe(mode="fp16"))
    assert "same output for every one of the 4 samples" in constant.uninformative


def test_the_scale_is_read_through_shape_ops_to_the_bounding_op(detector):
    assert output_ranges(onnx.load(str(detector))) == {"prob": ((0.0, 1.0), "Sigmoid")}


def test_invalid_output_ranges_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"write \[low, high\] with low < high"):
        Recipe(mode="fp16", output_ranges={"prob": [1, 0]})


def test_recipe_dump_keeps_only_the_thresholds_it_sets():
    r = Recipe.model_validate({"mode": "int8", "thresholds": {"max_error": 0.05}})
    again = Recipe.model_validate(r.model_dump(mode="json"))
    assert again.gate_thresholds.cosine_mean == 0.995 and again.gate_thresholds.max_error == 0.05


def test_no_progress_bars_when_stderr_is_not_a_terminal(capsys):
    with precision_progress() as progress, progress.stage("converting", 2) as step:
        step()
    assert progress._bars is None and capsys.readouterr().err == ""
    with precision_progress(enabled=True) as progress, progress.stage("comparing", 2) as step:
        step()
        step()
    assert progress._bars is not None


def test_sessions_are_keyed_by_file_content_identity(detector, tmp_path):
    copy = tmp_path / "m.onnx"
    copy.write_bytes(detector.read_bytes())
    first = gate_runs.session(copy)
    assert gate_runs.session(copy) is first
    copy.write_bytes(detector.read_bytes() + b"")  # rewritten: a new modification time is a new model
    import os

    os.utime(copy, ns=(1, 1))
    assert gate_runs.session(copy) is not first


def test_overflow_counts_agree_with_numpy_on_every_fp16_value():
    from trtfarm.precision.gate import overflow_counts

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)  # all 65,536 bit patterns
    rng = np.random.default_rng(0)
    for picked in [every, every[every == every], every[np.isfinite(every)], *(rng.choice(every, n) for n in
                                                                             (0, 1, 7, 1000)),
                   every.reshape(256, 256)[:, ::3]]:  # non-contiguous too
        finite = np.isfinite(picked)
        negative = int(np.isneginf(picked).sum())
        assert overflow_counts(picked) == (int(picked.size - finite.sum()) - negative, negative)
        assert overflow_counts(picked.astype(np.float32)) == overflow_counts(picked)


def _dequantize(scale: float, dtype: int) -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    q = helper.make_tensor_value_info("q", dtype, [None])
    zp = numpy_helper.from_array(np.array(0, helper.tensor_dtype_to_np_dtype(dtype)), "zp")
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["x"], name="dq"),
         helper.make_node("Relu", ["x"], ["y"], name="relu")], "dq", [q],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [None])],
        [numpy_helper.from_array(np.array(scale, np.float16), "s"), zp])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("dtype", [onnx.TensorProto.INT8, onnx.TensorProto.UINT8])
def test_a_dequantize_is_left_unwatched_only_where_onnxruntime_cannot_make_it_overflow(dtype, tmp_path):
    """The referee: onnxruntime dequantizing every value of the type, at scales on both sides of the bound."""
    import onnxruntime as ort

    values = np.arange(256).astype(np.uint8).view(np.int8 if dtype == onnx.TensorProto.INT8 else np.uint8)
    seen = set()
    for scale in [0.5, 64.0, 200.0, 256.0, 257.0, 300.0, 511.0, 520.0, 60000.0]:
        model = _dequantize(scale, dtype)
        path = tmp_path / f"dq{scale}.onnx"
        onnx.save(model, str(path))
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        # the DQ's output itself, as the gate watches it
        marked = gate_runs.with_outputs(path, ["x"])
        x = ort.InferenceSession(marked, providers=["CPUExecutionProvider"]).run(["x"], {"q": values})[0]
        unwatched = "x" not in gate_runs.low_precision_tensors(path)
        assert not unwatched or np.isfinite(x).all(), f"scale {scale}: an overflow would go unwatched"
        seen.add((unwatched, bool(np.isfinite(x).all())))
        del sess
    assert (True, True) in seen and (False, False) in seen  # both sides of the bound were drawn


@pytest.mark.integration
def test_the_gates_onnxruntime_threads_do_not_spin(detector):
    options = gate_runs.session(detector, keep=False).get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.graph_optimization_level == __import__("onnxruntime").GraphOptimizationLevel.ORT_DISABLE_ALL


def test_a_nan_in_both_at_the_same_value_is_agreement_and_a_nan_in_one_only_is_an_error():
    x = np.random.default_rng(0).standard_normal((8, 6))
    with np.errstate(invalid="ignore"):  # NaN wherever x < 0, in FP32 as in FP16
        ref, got = np.sqrt(x), np.sqrt(x.astype(np.float16)).astype(np.float64)
    fig = output_figures("y", ref, got, Recipe(mode="fp16"))
    assert not figure_failures([fig], Recipe(mode="fp16")) and fig.max_error < 1e-3
    # rows with a number to compare carry signal (a row of six NaN does not); cosine over the values both give
    assert fig.signal_rows == (x >= 0).any(axis=1).sum() == 7 and fig.cosine_signal_min > 0.9999
    lost = got.copy()
    lost[x > 0.5] = np.nan  # NaN where FP32 gives a number
    filled = got.copy()
    filled[x < 0] = 0.0  # a number where FP32 gives NaN
    for wrong in (lost, filled):
        failures = figure_failures([output_figures("y", ref, wrong, Recipe(mode="fp16"))], Recipe(mode="fp16"))
        assert any("max error inf" in f for f in failures), failures


def test_an_output_fp32_gives_nan_in_everywhere_is_not_judged():
    ref = np.full((4, 6), np.nan)
    fig = output_figures("y", ref, ref.copy(), Recipe(mode="fp16"))
    assert fig.signal_rows == 0 and "FP32 gives NaN or an infinity in every value" in fig.uninformative
    report = GateReport("fp16", not figure_failures([fig], Recipe(mode="fp16")), {}, [fig])
    assert report.passed is None and report.verdict == "not judged" and "'y'" in report.note


def sqrt_net(path) -> None:
    """``y = sqrt(x)`` [batch, 8], as PyTorch's operator test exports it."""
    graph = helper.make_graph([helper.make_node("Sqrt", ["x"], ["y"], name="root")], "sqrt",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.mark.integration
def test_fp16_of_a_sqrt_passes_on_generated_inputs_and_on_held_out_data_with_negative_values(tmp_path):
    """FP16's Sqrt gives NaN where FP32's does: that is neither an error of the output nor an FP16 overflow."""
    sqrt_net(tmp_path / "sqrt.onnx")
    made = convert_and_gate(tmp_path / "sqrt.onnx", Recipe(mode="fp16"), tmp_path / "fp16.onnx")
    assert made.report.verdict == "passed" and made.report.figures[0].signal_rows == 64
    assert any("magnitudes of normal values" in note for note in made.notes)

    np.savez(tmp_path / "held.npz", x=np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32))
    held = convert_and_gate(tmp_path / "sqrt.onnx", Recipe(mode="fp16"), tmp_path / "fp16.onnx",
                            heldout=tmp_path / "held.npz")
    assert held.report.verdict == "passed", held.report.failures
    assert held.report.figures[0].signal_rows == 32 and held.report.figures[0].max_error < 1e-3

    np.savez(tmp_path / "negative.npz", x=-1 - np.random.default_rng(1).random((32, 8)).astype(np.float32))
    none = convert_and_gate(tmp_path / "sqrt.onnx", Recipe(mode="fp16"), tmp_path / "fp16.onnx",
                            heldout=tmp_path / "negative.npz")
    assert none.report.verdict == "not judged" and none.report.failures == []  # NaN everywhere: no signal


def test_the_layer_wise_search_holds_the_tensors_that_depend_on_the_inputs_not_those_made_from_weights(tmp_path):
    """The test zoo's nets make their weights with ConstantOfShape: VGG-19's search held 3.9 GiB of them."""
    from .test_memory import dense_blocks

    dense_blocks(tmp_path / "dense.onnx", layers=4)
    model, values = gate_runs.all_tensors(tmp_path / "dense.onnx", {"x": np.ones((1, 8, 8, 8), np.float32)},
                                          keep=False)
    made = {n.output[0] for n in model.graph.node if n.op_type in ("ConstantOfShape", "Unsqueeze")}
    computed = [t for n in model.graph.node for t in n.output if t not in made]
    assert sorted(values) == sorted(computed) and len(computed) == 4 * 4 + 1 + 3


def test_an_output_the_same_for_every_sample_is_not_judged_though_each_row_varies():
    row = np.linspace(0.1, 1.0, 10)
    ref = np.tile(row, (8, 1))  # every sample gives the same row: a net that does not respond to its inputs
    fig = output_figures("y", ref, ref * (1 + 1e-4), Recipe(mode="fp16"))
    assert fig.signal_rows == 8 and fig.same_for_every_sample and fig.sample_spread == 0.0
    assert "same output for every one of the 8 samples" in fig.uninformative
    report = GateReport("fp16", not figure_failures([fig], Recipe(mode="fp16")), {}, [fig])
    assert report.verdict == "not judged" and "same output for every sample" in report.note

    varied = ref + np.random.default_rng(0).uniform(0, 0.1, (8, 1))  # samples differ: the comparison says something
    fig = output_figures("y", varied, varied, Recipe(mode="fp16"))
    assert not fig.same_for_every_sample and not fig.uninformative
    assert GateReport("fp16", True, {}, [fig]).verdict == "passed"


def test_samples_are_read_along_the_outputs_batch_axis_and_one_sample_says_nothing_of_spread():
    layers = np.array([0.2, 0.9])[:, None, None] + np.linspace(0, 0.3, 4)[None, None, :]
    state = np.tile(layers, (1, 6, 1))  # [layers, batch, hidden]: the same state for each of the 6 samples
    assert output_figures("h", state, state, Recipe(mode="fp16"), axis=1, samples=6).same_for_every_sample
    assert not output_figures("h", state, state, Recipe(mode="fp16")).same_for_every_sample  # axis 0: the layers
    assert output_figures("h", state, state, Recipe(mode="fp16"), axis=1, samples=12).sample_spread is None
    one = output_figures("y", np.linspace(0.1, 1, 10)[None], np.linspace(0.1, 1, 10)[None], Recipe(mode="fp16"))
    assert one.sample_spread is None and not one.same_for_every_sample
