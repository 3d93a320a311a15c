"""trtfarm's ModelOpt workarounds give the model ModelOpt gives, byte for byte, on real models.

Each conversion runs twice through trtfarm's ModelOpt adapter: with the workarounds, and with ModelOpt's own
functions (``modelopt_as_shipped``). The referee is ModelOpt itself: the two converted files must be the same bytes.
Each replacement is compared here with the function it replaces, on the versions ``library_versions.COMPARED``
names (the suite's own install: test_child.py holds it to them).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision.convert import convert_onnx
from trtfarm.precision.inputs import batches, fixed_batch, generated_inputs
from trtfarm.precision.recipe import Recipe
from trtfarm.precision.workarounds import _declared_shapes_hold, modelopt_as_shipped, modelopt_workarounds

from ..corpus.exported import exported_model
from ..corpus.families import family_models
from ..corpus.sources import corpus_file
from .test_control_flow import if_model
from .test_third_party import RATE, speech_like

pytestmark = pytest.mark.integration


def _stale_output_model(path):
    """A model whose output is declared rank 0 though its MatMul gives rank 2 (ModelOpt's own stale case)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="r")],
        "stale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


MODELS = {
    "ppocr-cls": lambda tmp: corpus_file("ppocr-cls"),  # Paddle2ONNX: dynamic dims, many unnamed nodes
    "gpt2-past-ts": lambda tmp: exported_model("gpt2-ts"),  # a decoder with past key values: expression dims
    "squeezenet": lambda tmp: next(m.path for m in family_models("onnx-light") if m.name == "squeezenet"),
    "stale-output": lambda tmp: _stale_output_model(tmp / "stale.onnx"),
}


def _feeds(path):
    model = onnx.load(str(path), load_external_data=False)
    made = generated_inputs(model, samples=8, seq=16)
    return batches(made.data, fixed_batch(model) or 4, made.unbatched)  # as the precision step batches


@pytest.mark.parametrize("mode", ["fp16", "int8"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_workarounds_give_modelopts_own_bytes(name, mode, tmp_path):
    src = MODELS[name](tmp_path)
    feeds = _feeds(src)
    with modelopt_workarounds() as applied:
        assert applied
    fast = convert_onnx(src, Recipe(mode=mode), tmp_path / "fast.onnx", feeds=feeds)
    with modelopt_as_shipped():
        with modelopt_workarounds() as applied:
            assert not applied
        own = convert_onnx(src, Recipe(mode=mode), tmp_path / "own.onnx", feeds=feeds)
    assert fast.path.read_bytes() == own.path.read_bytes()


def test_a_stale_output_declaration_is_left_to_modelopt(tmp_path):
    stale = onnx.load(str(_stale_output_model(tmp_path / "stale.onnx")))
    assert not _declared_shapes_hold(stale)
    assert list(stale.graph.output[0].type.tensor_type.shape.dim) == []  # the check puts the declaration back
    healthy = onnx.load(str(corpus_file("ppocr-det")), load_external_data=False)  # the detector the workaround is for
    assert _declared_shapes_hold(healthy)


def _modelopts_functions():
    from modelopt.onnx import utils
    from modelopt.onnx.autocast import utils as autocast_utils
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter
    from modelopt.onnx.autocast.referencerunner import ReferenceRunner
    from onnxruntime.quantization.calibrate import HistogramCollector

    return (utils._reconcile_stale_output_shapes, PrecisionConverter.__dict__["_cleanup_no_consumer_nodes"],
            utils.remove_redundant_casts, utils._sync_value_info_elem_type,
            ReferenceRunner.__dict__["_get_ort_runner"], PrecisionConverter.__dict__["_convert_subgraph_precision"],
            HistogramCollector.__dict__["merge_histogram"], PrecisionConverter.__dict__["_ensure_types_are_defined"],
            autocast_utils.clear_types_and_shapes_recursive,
            PrecisionConverter.__dict__["_restore_original_io_metadata"], HistogramCollector.__dict__["collect"])


def test_each_replacement_names_the_function_and_the_version_it_covers():
    import re

    from trtfarm.precision import histograms, workarounds
    from trtfarm.precision.library_versions import COMPARED

    docs = [f.__doc__ for module in (workarounds, histograms) for f in vars(module).values()
            if callable(f) and f.__doc__ and getattr(f, "__module__", "") == module.__name__]
    with modelopt_workarounds():
        replaced = [name for _, name, _ in workarounds._INSTALLED._made]
    assert len(replaced) == len(_modelopts_functions())
    unnamed = [name for name in replaced if not any(re.search(rf"\b{name}\b", d) and any(
        v in d for v in COMPARED.values()) for d in docs)]
    assert unnamed == []


def test_modelopts_functions_are_back_after_the_block():
    before = _modelopts_functions()
    with modelopt_workarounds(), modelopt_workarounds():
        assert all(now is not then for now, then in zip(_modelopts_functions(), before, strict=True))
    assert _modelopts_functions() == before


def test_the_reference_runs_outputs_are_handed_on_uncopied_because_onnxruntime_never_reuses_them(tmp_path):
    import copy

    from modelopt.onnx.autocast.referencerunner import ReferenceRunner
    from polygraphy import constants
    from polygraphy.backend.onnx import ModifyOutputs

    model = onnx.load(str(_stale_output_model(tmp_path / "m.onnx")))
    model.graph.output[0].type.tensor_type.shape.CopyFrom(onnx.TensorShapeProto(dim=[onnx.TensorShapeProto.Dimension(
        dim_param="batch"), onnx.TensorShapeProto.Dimension(dim_value=8)]))
    feed = {"x": np.ones((2, 8), np.float32)}
    with modelopt_workarounds():
        reference = ReferenceRunner(model)
        runners, _ = reference._get_ort_runner(ModifyOutputs(model, outputs=constants.MARK_ALL))
    with runners[0] as runner:
        first, second = runner.infer(feed_dict=feed), runner.infer(feed_dict=feed)
    assert set(first) == {"h", "y"}
    assert all(not np.shares_memory(first[k], second[k]) for k in first)  # each run's arrays are its own
    copied = copy.deepcopy(first)
    assert all(copied[k] is first[k] for k in first) and copied is not first


def test_if_branches_lose_no_node_to_modelopts_id_lookups_and_convert_as_modelopt_would(tmp_path):
    silero = corpus_file("silero-vad")
    feeds = [{"input": speech_like(4), "state": np.zeros((2, 4, 128), np.float32), "sr": np.array(RATE, np.int64)}]
    plain = if_model(tmp_path / "if.onnx")  # If branches ModelOpt's own function converts
    plain_feeds = [{"x": np.ones((2, 8), np.float32), "cond": np.array(True)}]
    fixed = convert_onnx(silero, Recipe(mode="fp16"), tmp_path / "fixed.onnx", feeds=feeds)
    fast = convert_onnx(plain, Recipe(mode="fp16"), tmp_path / "fast.onnx", feeds=plain_feeds)
    with modelopt_as_shipped():
        shipped = convert_onnx(silero, Recipe(mode="fp16"), tmp_path / "own.onnx", feeds=feeds)
        assert any("KeyError at modelopt/onnx/autocast/precisionconverter.py" in n for n in shipped.notes)  # alone
        own = convert_onnx(plain, Recipe(mode="fp16"), tmp_path / "own-if.onnx", feeds=plain_feeds)
    assert fast.path.read_bytes() == own.path.read_bytes()
    assert {n.op_type for n in onnx.load(str(fixed.path)).graph.node} >= {"If"}
    assert not any("control flow" in n for n in fixed.notes)  # with the workaround, ModelOpt converts it whole


def test_a_histogram_of_float32s_lowest_value_merges_where_onnxruntimes_own_merge_overflows():
    from onnxruntime.quantization.calibrate import HistogramCollector

    own = HistogramCollector.__dict__["merge_histogram"]
    collector = HistogramCollector("entropy", True, 128, 128, 99.99, "same")
    lowest = np.finfo(np.float32).min
    masked = np.array([lowest, -1.0, 0.0, 1.0], np.float32)  # an additive attention mask's scores
    threshold = np.float32(-lowest)
    hist, edges = np.histogram(masked, 128, range=(-float(threshold), float(threshold)))  # ModelOpt's first one
    first = (hist, edges, masked.min(), masked.max(), threshold)
    with pytest.raises(ValueError, match="Too many bins"):
        own(collector, first, masked, masked.min(), masked.max(), threshold)
    with modelopt_workarounds():
        merged = HistogramCollector.merge_histogram(collector, first, masked, masked.min(), masked.max(), threshold)
    assert merged[0].sum() == 2 * masked.size and np.all(np.diff(merged[1]) > 0) and merged[4] == threshold
    plain = np.array([-2.0, 0.5, 3.0], np.float32)  # a merge onnxruntime does: its own result, unchanged
    start = (*np.histogram(plain, 128, range=(-3.0, 3.0)), plain.min(), plain.max(), np.float32(3.0))
    expected = own(collector, start, plain, plain.min(), plain.max(), np.float32(3.0))
    with modelopt_workarounds():
        got = HistogramCollector.merge_histogram(collector, start, plain, plain.min(), plain.max(), np.float32(3.0))
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_histograms_made_in_parts_are_the_loops_own_in_the_loops_order(monkeypatch):
    import threading

    from onnxruntime.quantization.calibrate import HistogramCollector

    from trtfarm.precision.histograms import split_collect

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})  # two CPUs, whatever runs the test
    rng = np.random.default_rng(0)
    sizes = {"a": 40_000, "b": 10, "c": 300_000, "d": 2_000, "e": 70_000}
    batches = [{n: [rng.standard_normal(s).astype(np.float32) * (k + 1)] for n, s in sizes.items()}
               for k in range(3)]
    batches[1]["f"] = [rng.standard_normal(500).astype(np.float32)]  # a tensor first seen in a later batch
    calls = []  # (the tensors of a part, whether it ran off the calling thread)
    own_value = HistogramCollector.collect_value
    caller = threading.get_ident()

    def collect_value(self, name_to_arr):
        calls.append((set(name_to_arr), threading.get_ident() != caller))
        return own_value(self, name_to_arr)

    monkeypatch.setattr(HistogramCollector, "collect_value", collect_value)
    loop, parts = (HistogramCollector("entropy", False, 128, 128, 99.99, "same") for _ in range(2))
    split = split_collect(HistogramCollector.__dict__["collect"])
    for batch in batches:
        HistogramCollector.collect(loop, batch)
    for batch in batches:
        calls.clear()
        split(parts, batch)
        names = [c[0] for c in calls]
        assert len(names) == 2 and all(c[1] for c in calls), "not two parts, each in a pool thread"
        assert names[0].isdisjoint(names[1]) and names[0] | names[1] == set(batch)
        assert {"c"} in names  # the largest tensor weighs as much as the rest: a part of its own
    assert list(parts.histogram_dict) == list(loop.histogram_dict) == ["a", "b", "c", "d", "e", "f"]
    for name, want in loop.histogram_dict.items():
        assert all(np.array_equal(g, w) for g, w in zip(parts.histogram_dict[name], want, strict=True)), name
