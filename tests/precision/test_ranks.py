"""Every NumPy helper of the gate and the layer-wise search, on a tensor of any rank and of every dtype models carry.

Generated (Hypothesis): ranks 0 to 4 with sides of 0 (empty tensors), float16, float32, float64, int8, uint8, int32,
int64 and bool, NaN and infinities among the floats. Fixed, so that no run leaves one out: every dtype at 0-d, 1-d,
empty and 3-d, and one large tensor (4 Mi values, its difference in one float64 buffer). Then the commands, as a
user runs them, on a model with 0-d tensors (an int64 row count from ``Shape``/``Gather``, a float sum over every
axis) and a 0-d output: ``trtfarm precision`` in int8 and fp16 and ``trtfarm build`` in int8, each gate made to fail
so that the layer-wise search compares every tensor, the 0-d ones included (on a 0-d tensor NumPy's subtraction gave
a scalar and the search ended in ``TypeError: return arrays must be of ArrayType``): a verdict, no traceback.

Tensors of no rows, and autopin's candidates on empty tensors and NaN, are checked at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision import figures, runs
from trtfarm.precision.autopin import overflow_candidates
from trtfarm.precision.gate import FP16_MAX, overflow_counts, sample_count
from trtfarm.precision.layerwise import _abs_max, _relative_error, layerwise_divergence, worst_samples
from trtfarm.precision.recipe import Recipe

from ..fleets import ONE_RTX_TARGET

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
BIG = 1e150  # float64 values stay within this: a difference, or one over max |x| + 1e-12, then fits float64


def examples(n: int) -> settings:
    """``n`` examples in CI; the ``long`` profile's own number (``--hypothesis-profile long``)."""
    chosen = settings.default
    return settings(max_examples=n if chosen.max_examples <= 100 else chosen.max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _elements(dtype, finite: bool):
    if np.dtype(dtype).kind != "f":
        return hnp.from_dtype(np.dtype(dtype))
    width = np.dtype(dtype).itemsize * 8
    bound = BIG if width == 64 else None
    values = st.floats(min_value=-bound if bound else None, max_value=bound, width=width, allow_nan=False,
                       allow_infinity=False)
    return values if finite else st.one_of(values, st.sampled_from([np.nan, np.inf, -np.inf]))


@st.composite
def pairs(draw, shapes=SHAPES):
    """(FP32's tensor, the converted model's, whether both are finite): same dtype and shape, equal at times."""
    dtype, shape, finite = draw(st.sampled_from(DTYPES)), draw(shapes), draw(st.booleans())
    a = draw(hnp.arrays(dtype, shape, elements=_elements(dtype, finite)))
    b = a.copy() if draw(st.booleans()) else draw(hnp.arrays(dtype, shape, elements=_elements(dtype, finite)))
    return a, b, finite


def _as_float(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


# --- the checks, each on one pair of tensors (FP32's, the converted model's) ----------------------------------------


def check_relative_error(a: np.ndarray, b: np.ndarray, finite: bool) -> None:
    """0 for a tensor against itself, never NaN, finite for finite tensors, the figure float64 copies give."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the user's terminal either
        rel, same, peak = _relative_error(a, b), _relative_error(a, a), _abs_max(a)
    assert same == 0.0 and rel >= 0.0 and not np.isnan(rel)
    fa, fb = _as_float(a), _as_float(b)
    assert peak == np.abs(fa[np.isfinite(fa)]).max(initial=0.0)
    if finite:
        assert np.isfinite(rel)
        assert rel == np.abs(fa - fb).max(initial=0.0) / (peak + 1e-12)  # the same figure as in float64 copies
    agree = (np.isnan(fa) & np.isnan(fb)) | (fa == fb)
    assert (rel == np.inf) == bool((~agree & ~(np.isfinite(fa) & np.isfinite(fb))).any())


def check_overflow_counts(a: np.ndarray) -> None:
    fa = _as_float(a)
    assert overflow_counts(a) == (int(np.isnan(fa).sum() + np.isposinf(fa).sum()), int(np.isneginf(fa).sum()))


def _batched(a: np.ndarray) -> onnx.ModelProto:
    """A model of input ``x`` (``a``'s shape, its batch symbolic; none for a 0-d ``a``) and output ``y``, the same."""
    elem = helper.np_dtype_to_tensor_dtype(a.dtype)
    dims = ["N", *a.shape[1:]] if a.ndim else []
    value = [helper.make_tensor_value_info(n, elem, dims) for n in ("x", "y")]
    return helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "m", value[:1],
                                               value[1:]))


def check_worst_samples(a: np.ndarray, b: np.ndarray, parts: int) -> None:
    """``a`` split into ``parts`` feeds along its batch: a feed of ``a``'s rows back, as many as asked at most."""
    model = _batched(a)
    feeds = [{"x": p} for p in np.array_split(a, parts)] if a.ndim else [{"x": a}]
    assert sample_count(model, feeds) == (len(a) if a.ndim else 1)
    feed = worst_samples(model, feeds, {"y": a}, {"y": b}, {}, count=2)
    assert set(feed) == {"x"} and feed["x"].dtype == a.dtype and feed["x"].shape[1:] == a.shape[1:]
    assert feed["x"].ndim == a.ndim and (not a.ndim or len(feed["x"]) <= max(2, *(len(f["x"]) for f in feeds)))


def _pair_models(folder: Path, dtype, shape) -> tuple[Path, Path]:
    """FP32's ``t = x, u = noise, w = t``; the converted model's ``t = noise, u = x, w = t``: the same names.

    ``t`` and ``u`` carry the difference of ``x`` and ``noise``; ``w`` inherits ``t``'s and adds none.
    """
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def write(path: Path, t: str, u: str) -> Path:
        value = [helper.make_tensor_value_info(n, elem, list(shape)) for n in ("x", "noise", "t", "u", "w")]
        nodes = [helper.make_node("Identity", [t], ["t"], name="t"), helper.make_node("Identity", [u], ["u"], name="u"),
                 helper.make_node("Identity", ["t"], ["w"], name="w")]
        model = helper.make_model(helper.make_graph(nodes, "pair", value[:2], value[2:]),
                                  opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        onnx.save(model, str(path))
        return path

    return write(folder / "fp32.onnx", "x", "noise"), write(folder / "converted.onnx", "noise", "x")


def check_layerwise_search(a: np.ndarray, b: np.ndarray) -> None:
    """The search over two models whose tensors are ``a`` and ``b`` (onnxruntime runs them), and auto-pin's look."""
    with tempfile.TemporaryDirectory() as folder:
        fp32, converted = _pair_models(Path(folder), a.dtype, a.shape)
        found = layerwise_divergence(fp32, converted, {"x": a, "noise": b}, rel_tol=0.0)
        if a.dtype.kind == "f":
            candidates = overflow_candidates(fp32, {"x": a, "noise": b})
            assert set(candidates) <= {"t", "u", "w"}
            if (np.abs(_as_float(a)) > FP16_MAX).any():
                assert "t" in candidates
    fa, fb = _as_float(a), _as_float(b)
    t_overflows = not np.isfinite(fb).all() and np.isfinite(fa).all()
    assert {d["node"] for d in found} <= ({"t", "u", "w"} if t_overflows else {"t", "u"})  # w adds no error to t's
    assert all(d["cost"] > 0 and not np.isnan(d["cost"]) for d in found)
    if np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
        assert found == []


def check_joined_outputs(a: np.ndarray, b: np.ndarray, parts: int) -> None:
    """runs.py: the feeds' digest, and per-feed outputs joined along the batch (a 0-d one: the first feed's)."""
    assert runs.feeds_key([{"x": a}]) == runs.feeds_key([{"x": a.copy()}])
    if a.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            assert runs.feeds_key([{"x": a}]) != runs.feeds_key([{"x": a.astype(np.float32)}])
    per_feed = [{"y": a, "z": b} for _ in range(parts)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # float64 beyond float32's range: inf, as onnxruntime's
        joined = runs.joined(per_feed)
    kept = runs.joined(per_feed, keep_dtype=True)
    rows = (parts * len(a),) if a.ndim else ()
    assert joined["y"].dtype == np.float32 and kept["y"].dtype == a.dtype
    assert joined["y"].shape == kept["z"].shape == rows + a.shape[1:]
    if a.ndim >= 2:  # along another axis (a recurrent state's batch)
        assert runs.joined(per_feed, axes={"y": 1}, keep_dtype=True)["y"].shape == \
            (a.shape[0], parts * a.shape[1], *a.shape[2:])


def check_output_figures(a: np.ndarray, b: np.ndarray, finite: bool, task: str, mode: str) -> None:
    fig = figures.output_figures("y", a, b, Recipe(mode=mode, task=task))
    same = figures.output_figures("y", a, a.copy(), Recipe(mode=mode, task=task))
    assert same.max_abs == 0.0 and same.max_error == 0.0
    assert fig.max_abs >= 0 and not np.isnan(fig.max_abs) and fig.rows == (len(a) if a.ndim else 1)
    if finite:
        assert np.isfinite(fig.max_abs) and np.isfinite(fig.max_error)
    assert all(-1 - 1e-9 <= c <= 1 + 1e-9 for c in (fig.cosine_mean, fig.cosine_min))


def check_figure_helpers(a: np.ndarray, b: np.ndarray, finite: bool, axis: int) -> None:
    """figures.py's ``sample_spread``, ``agreeing``, ``_rows``, ``_cosine`` and ``recall_at_k``."""
    spread = figures.sample_spread(a, axis)
    assert spread is None or spread >= 0 and (np.isfinite(spread) or not finite)
    fa, fb = _as_float(a), _as_float(b)
    agree = figures.agreeing(a, b)
    assert np.array_equal(agree, (np.isnan(fa) & np.isnan(fb)) | (np.isinf(fa) & (fa == fb)))
    ra, rb = figures._rows(a), figures._rows(b)
    assert ra.ndim == 2 and ra.dtype == np.float64 and ra.size == a.size
    cos = figures._cosine(ra, rb)
    assert cos.shape == (len(ra),) and (np.abs(cos) <= 1 + 1e-9).all()
    if finite and len(ra) >= 2:
        assert 0.0 <= figures.recall_at_k(ra, rb, min(3, len(ra) - 1)) <= 1.0


# --- generated: any rank, sides of 0, every dtype, NaN and infinities ---------------------------------------------


@examples(150)
@given(pairs())
def test_relative_error_and_max_magnitude_at_any_rank(pair):
    check_relative_error(*pair)


@examples(100)
@given(pairs())
def test_overflow_counts_at_any_rank(pair):
    check_overflow_counts(pair[0])


@examples(100)
@given(pairs(), st.integers(1, 3))
def test_worst_samples_and_sample_count_at_any_rank(pair, parts):
    check_worst_samples(pair[0], pair[1], parts)


@examples(25)
@given(pairs(shapes=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3)))
def test_layerwise_search_and_overflow_candidates_at_any_rank(pair):
    check_layerwise_search(pair[0], pair[1])


@examples(100)
@given(pairs(), st.integers(1, 3))
def test_feeds_key_and_joined_outputs_at_any_rank(pair, parts):
    check_joined_outputs(pair[0], pair[1], parts)


@examples(150)
@given(pairs(), st.sampled_from(["generic", "classifier", "embedding"]), st.sampled_from(["fp16", "int8"]))
def test_output_figures_at_any_rank(pair, task, mode):
    check_output_figures(*pair, task, mode)


@examples(150)
@given(pairs(), st.integers(0, 3))
def test_sample_spread_agreement_rows_and_cosine_at_any_rank(pair, axis):
    check_figure_helpers(*pair, axis)


# --- every dtype at 0-d, 1-d and empty, each time; one large tensor -----------------------------------------------

GRID_SHAPES = [(), (1,), (5,), (0,), (3, 0), (0, 3), (2, 3, 4)]


def _grid_pair(dtype, shape: tuple, finite: bool) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``dtype`` in ``shape``; ``b`` differs from ``a`` in its first; NaN and infinities unless ``finite``."""
    rng = np.random.default_rng(len(shape))
    values = np.asarray(rng.standard_normal(shape) * 100)  # an array at rank 0 too (NumPy gives a float)
    a = values.astype(dtype) if np.dtype(dtype).kind != "b" else np.asarray(values > 0)
    b = a.copy()
    if b.size:
        b.flat[0] = ~b.flat[0] if b.dtype == np.bool_ else b.flat[0] + 1
    if not finite and a.size:
        a.flat[-1], b.flat[-1] = np.nan, np.nan  # agreement
        if a.size >= 3:
            a.flat[1], b.flat[1], b.flat[2] = np.inf, np.inf, -np.inf  # agreement; an overflow
    return a, b


GRID = [pytest.param(dtype, shape, finite, id=f"{np.dtype(dtype).name}-{shape}{'' if finite else '-nonfinite'}")
        for dtype in DTYPES for shape in GRID_SHAPES for finite in ((True, False) if np.dtype(dtype).kind == "f"
                                                                    else (True,))]


@pytest.mark.parametrize(("dtype", "shape", "finite"), GRID)
def test_every_helper_on_each_rank_of_each_dtype(dtype, shape, finite):
    a, b = _grid_pair(dtype, shape, finite)
    check_relative_error(a, b, finite)
    check_overflow_counts(a)
    check_worst_samples(a, b, 2)
    check_layerwise_search(a, b)
    check_joined_outputs(a, b, 2)
    for task in ("generic", "classifier", "embedding"):
        check_output_figures(a, b, finite, task, "int8")
    check_figure_helpers(a, b, finite, 0)


def test_the_large_tensor_in_one_float64_buffer_and_the_same_figures():
    """4 Mi float32 values with a NaN, infinities and an overflow: the difference takes one float64 buffer, no more."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256, 256), dtype=np.float32)
    b = a + np.float32(1e-3)
    a.flat[:3] = b.flat[:3] = [np.nan, np.inf, -np.inf]  # agreement: no error
    tracemalloc.start()
    try:
        rel = _relative_error(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * a.size * 8  # one float64 buffer, and one bool mask where a value is not finite
    finite = np.isfinite(a)
    want = np.abs(a[finite].astype(np.float64) - b[finite]).max() / (float(np.abs(a[finite]).max()) + 1e-12)
    assert rel == want and _abs_max(a) == np.abs(a[finite]).max()
    check_overflow_counts(a)
    check_overflow_counts(a.astype(np.float16))
    b.flat[-1] = np.inf  # a converted value that overflows where FP32's is finite
    assert _relative_error(a, b) == np.inf
    feed = worst_samples(_batched(a), [{"x": a}], {"y": a}, {"y": b}, {})
    assert len(feed["x"]) == 4 and np.array_equal(feed["x"][-1], a[-1], equal_nan=True)  # the broken row is kept
    fig = figures.output_figures("y", a, b, Recipe(mode="fp16"))
    assert fig.rows == 64 and fig.max_abs == np.inf


@pytest.mark.parametrize("scale", [np.float32(0.01), np.array([0.01, 0.02], np.float32), np.zeros(0, np.float32),
                                   np.float32(np.inf), np.float32(300.0)], ids=["0-d", "1-d", "empty", "inf", "wide"])
def test_a_dequantize_of_any_scale_rank_is_judged_bounded_or_not(scale):
    nodes = [helper.make_node("DequantizeLinear", ["q", "scale"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("q", TensorProto.INT8, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.asarray(scale), "scale")])
    bounded = runs.bounded_dequantize(helper.make_model(graph), {"q": TensorProto.INT8})
    finite = np.asarray(scale).size and np.isfinite(scale).all() and 255 * np.max(scale) < FP16_MAX
    assert bounded == ({"y"} if finite else set())


# --- tensors of no rows, NaN beside an overflow ----------------------------------------------------------------------

NO_ROWS = [pytest.param(np.zeros(shape, dtype), id=f"{np.dtype(dtype).name}-{shape}")
           for dtype, shape in [(np.float32, (0,)), (np.int64, (0,)), (np.float16, (0, 3)), (np.bool_, (0, 2, 2))]]


@pytest.mark.parametrize("ref", NO_ROWS)
def test_output_figures_of_a_tensor_of_no_rows_say_it_is_empty(ref):
    """A detector's output with no detections: nothing to compare, so the output is not judged."""
    fig = figures.output_figures("boxes", ref, ref.copy(), Recipe(mode="int8"))
    assert fig.signal_rows == 0 and "the output is empty on these inputs" in fig.uninformative


def test_overflow_candidates_of_an_empty_float_tensor(tmp_path):
    fp32, _ = _pair_models(tmp_path, np.float32, (0, 3))
    assert overflow_candidates(fp32, {"x": np.zeros((0, 3), np.float32), "noise": np.zeros((0, 3), np.float32)}) == []


def test_overflow_candidates_of_a_tensor_that_holds_nan_and_an_overflow(tmp_path):
    fp32, _ = _pair_models(tmp_path, np.float32, (2,))
    x = np.array([np.nan, 1e6], np.float32)
    assert "t" in overflow_candidates(fp32, {"x": x, "noise": x})


# --- the commands ----------------------------------------------------------------------------------------------------


def write_scalar_model(folder: Path) -> Path:
    """x [b, 16] -> y = x @ w + sum(x @ w) [b, 8]; mean = sum(y) / (rows * 8), 0-d; and a calibration set.

    The 0-d tensors: ``total`` (float, a sum over every axis), ``rows`` (int64, ``Gather`` of ``Shape``), ``rows_f``,
    ``count``, ``y_sum``, and the output ``mean``.
    """
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "all_axes"),
             numpy_helper.from_array(np.array(0, np.int64), "first"),
             numpy_helper.from_array(np.array(8.0, np.float32), "width")]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w"], ["h"], name="fc"),
             n("ReduceSum", ["h", "all_axes"], ["total"], name="total", keepdims=0),
             n("Add", ["h", "total"], ["y"], name="shift"),
             n("Shape", ["x"], ["shape"], name="shape"),
             n("Gather", ["shape", "first"], ["rows"], name="rows", axis=0),
             n("Cast", ["rows"], ["rows_f"], name="rows_f", to=TensorProto.FLOAT),
             n("Mul", ["rows_f", "width"], ["count"], name="count"),
             n("ReduceSum", ["y", "all_axes"], ["y_sum"], name="y_sum", keepdims=0),
             n("Div", ["y_sum", "count"], ["mean"], name="mean")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8]),
               helper.make_tensor_value_info("mean", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "scalars", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(folder / "model.onnx"))
    np.savez(folder / "calib.npz", x=rng.standard_normal((32, 16)).astype(np.float32))
    return folder / "model.onnx"


def trtfarm(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(cwd / ".prefect"), "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, text=True, timeout=300,
                          capture_output=True)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-4000:]
    return proc


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["int8", "fp16"])
def test_the_precision_command_on_0d_tensors_gives_a_verdict(tmp_path, mode):
    model = write_scalar_model(tmp_path)
    proc = trtfarm(tmp_path, "precision", str(model), "--mode", mode, "--calibration", "calib.npz",
                   "--max-error", "0", "--json")  # no error is within 0: the gate fails, the layer-wise search runs
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    gate = json.loads(proc.stdout)["gate"]
    assert gate["verdict"] == "failed" and isinstance(gate["diverging_nodes"], list)
    assert {f["output"] for f in gate["figures"]} == {"y", "mean"}


@pytest.mark.integration
def test_an_int8_build_on_0d_tensors_ends_in_its_result(tmp_path):
    model = write_scalar_model(tmp_path)
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (tmp_path / "farm.yaml").write_text("precision: {mode: int8, thresholds: {max_error: 0}}\n")
    failed = trtfarm(tmp_path, "build", str(model), "--profile", "x=1x16:8x16:16x16")
    assert failed.returncode == 1 and failed.stdout.rstrip().splitlines()[-1] == "1 failed", failed.stdout[-2000:]
    assert "int8 accuracy gate failed" in failed.stdout
    (tmp_path / "farm.yaml").write_text("precision: int8\n")
    built = trtfarm(tmp_path, "build", str(model), "--profile", "x=1x16:8x16:16x16")
    assert built.returncode == 0 and built.stdout.rstrip().splitlines()[-1] == "1 built", built.stdout[-2000:]
