"""Validation logic on CPU with real inputs. onnxruntime runners stand in for the plan. Latency samples were
recorded here from onnxruntime. The inspector JSON is written in the documented TensorRT 11.x format (a real one
needs the engine on a GPU). The trtexec trace follows trtexec's --exportTimes format.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from trtfarm.precision.step import Recipe, convert_and_gate
from trtfarm.profiles.profile import profile_from_args
from trtfarm.validation.compare import compare_point, inputs_for_shapes, profile_points
from trtfarm.validation.engine_gpu import EngineValidation
from trtfarm.validation.latency import latency_stats, regression_check, stats_from_trtexec_times
from trtfarm.validation.summary import engine_check
from trtfarm.validation.tactics import diff_tactics, tactics_digest, tactics_from_inspector

from ..conftest import ENCODER_PROFILE
from ..test_manifest import sample

DATA = Path(__file__).resolve().parents[1] / "data"


def recorded_latency():
    doc = json.loads((DATA / "latency_ort_cpu_16x128.json").read_text())
    return doc["latency_ms"], doc["batch"]


def test_latency_percentiles_and_throughput_from_recorded_samples():
    ms, batch = recorded_latency()
    s = latency_stats(ms, batch)
    assert s.samples == 200 and s.p50 <= s.p90 <= s.p95 <= s.p99 <= max(ms)
    assert s.throughput == pytest.approx(batch * 1000 / (sum(ms) / len(ms)))
    with pytest.raises(ValueError):
        latency_stats([], 1)


def test_trtexec_trace_separates_gpu_compute_from_host_overhead():
    trace = json.loads((DATA / "trtexec_times_format.json").read_text())
    s = stats_from_trtexec_times(trace, batch=16)
    assert s.samples == 50 and s.compute_mean < s.mean
    assert s.host_overhead_mean == pytest.approx(0.08, abs=1e-6)  # inMs + outMs per iteration in that trace


def test_regression_gate_flags_p99_beyond_the_limit():
    assert regression_check({"p99": 2.2}, {"p99": 2.0}).regressed  # +10% > 5%
    assert not regression_check({"p99": 2.05}, {"p99": 2.0}).regressed
    assert regression_check({"p99": 2.0}, None) is None


def test_inspector_tactics_digest_and_diff_against_the_previous_release():
    before = tactics_from_inspector((DATA / "inspector_11x_release1.json").read_text())
    after = tactics_from_inspector((DATA / "inspector_11x_release2.json").read_text())
    assert before["attn/q + attn/k + attn/v"].endswith("(0x2e4b1b1c74c0c4a9)")
    assert tactics_digest(before) != tactics_digest(after) and tactics_digest(before) == tactics_digest(dict(before))
    diff = diff_tactics(before, after)
    assert [c[0] for c in diff.changed] == ["attn/q + attn/k + attn/v"]
    assert diff.added == ["attn/softmax + attn/context"] and diff.removed == ["attn/softmax"]
    assert diff.describe() == "1 tactic(s) changed, 1 layer(s) added, 1 layer(s) fused away"
    assert tactics_from_inspector({"Layers": ["a", "b"]}) == {"a": "?", "b": "?"}  # LAYER_NAMES_ONLY verbosity


@pytest.fixture(scope="module")
def fp16_encoder(example_onnx, tmp_path_factory):
    return convert_and_gate(example_onnx, Recipe(mode="fp16"), tmp_path_factory.mktemp("v") / "fp16.onnx").path


def run(path, feed):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))


def points(example_onnx, candidate, recipe):
    model = onnx.load(str(example_onnx))
    out = []
    for point, shapes in profile_points(profile_from_args(ENCODER_PROFILE)):
        feed = inputs_for_shapes(model, shapes)
        out.append(compare_point(0, point, shapes, run(example_onnx, feed), run(candidate, feed), recipe))
    return out


def test_comparisons_at_min_opt_max_pass_for_fp16_and_fail_for_a_broken_model(example_onnx, fp16_encoder, tmp_path):
    ok = points(example_onnx, fp16_encoder, Recipe(mode="fp16", task="embedding"))
    assert [p.point for p in ok] == ["min", "opt", "max"] and not any(p.failures for p in ok)
    assert ok[2].shapes["input_ids"] == [32, 512]
    broken = onnx.load(str(example_onnx))
    next(i for i in broken.graph.initializer if i.name == "wo").float_data[:] = []
    import numpy as np
    from onnx import numpy_helper

    for i in broken.graph.initializer:
        if i.name == "wo":
            i.CopyFrom(numpy_helper.from_array(np.zeros((64, 64), np.float32) + 0.5, "wo"))
    onnx.save(broken, str(tmp_path / "broken.onnx"))
    bad = points(example_onnx, tmp_path / "broken.onnx", Recipe(mode="fp16", task="embedding"))
    assert all(p.failures for p in bad) and "cosine mean" in bad[0].failures[0]


def validation(example_onnx, fp16_encoder, scale=1.0):
    ms, batch = recorded_latency()
    before = tactics_from_inspector((DATA / "inspector_11x_release2.json").read_text())
    return EngineValidation(points(example_onnx, fp16_encoder, Recipe(mode="fp16", task="embedding")),
                            {0: latency_stats([m * scale for m in ms], batch)}, tactics=before,
                            memory_per_profile=[64 << 20], contexts=[12])


def test_engine_check_passes_then_flags_a_p99_regression_and_tactic_changes(example_onnx, fp16_encoder):
    first, tactics, digest = engine_check(validation(example_onnx, fp16_encoder), "NVIDIA H100 80GB HBM3")
    assert first.status == "passed" and first.figures["latency"]["0"]["p99"] > 0 and digest == tactics_digest(tactics)
    previous = sample()
    previous.verification.engine = first
    previous.plan.tactics = tactics_from_inspector((DATA / "inspector_11x_release1.json").read_text())
    slower, _, _ = engine_check(validation(example_onnx, fp16_encoder, scale=1.2), "NVIDIA H100 80GB HBM3", previous)
    assert slower.status == "failed" and "REGRESSION" in slower.detail
    assert slower.figures["tactic_changes"]["summary"].startswith("1 tactic(s) changed")


def test_heldout_samples_are_fitted_to_each_profile_point(example_onnx):
    import numpy as np

    from trtfarm.validation.compare import fit_to_shape

    heldout = {"input_ids": np.arange(3 * 40).reshape(3, 40), "attention_mask": np.ones((3, 40), np.int64)}
    model = onnx.load(str(example_onnx))
    small = inputs_for_shapes(model, {"input_ids": [1, 16], "attention_mask": [1, 16]}, heldout=heldout)
    assert small["input_ids"].tolist() == [list(range(16))]
    big = fit_to_shape(heldout["attention_mask"], [4, 64])
    assert big.shape == (4, 64) and big[:, :40].all() and not big[:, 40:].any()  # padded rows are masked out
