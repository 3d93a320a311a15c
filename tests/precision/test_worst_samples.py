"""The layer-wise search runs the samples whose outputs drift most from FP32, wherever they are in the feeds."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from trtfarm.precision.gate import LAYERWISE_SAMPLES, worst_samples


def _model(batch: str | int = "N", scale: bool = True):
    """x [batch, 3] (and an unbatched scalar ``s``) -> y [batch, 2], z [2, batch] (its batch on axis 1)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])]
    if scale:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2]),
               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, batch])]
    return helper.make_model(helper.make_graph([], "m", inputs, outputs))


def _feeds(rows: list[int], scale: bool = True) -> list[dict]:
    start, feeds = 0, []
    for n in rows:
        feed = {"x": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(3, axis=1)}
        if scale:
            feed["s"] = np.float32(2.0)
        feeds.append(feed)
        start += n
    return feeds


def _outputs(total: int, drift_y: dict[int, float], drift_z: dict[int, float] | None = None):
    rng = np.random.default_rng(0)
    ref = {"y": rng.uniform(1, 2, (total, 2)).astype(np.float32),
           "z": rng.uniform(1, 2, (2, total)).astype(np.float32)}
    got = {k: v.copy() for k, v in ref.items()}
    for i, d in drift_y.items():
        got["y"][i, 1] += d
    for i, d in (drift_z or {}).items():
        got["z"][0, i] += d
    return ref, got


def _samples(feed: dict) -> list[int]:
    return [int(v) for v in feed["x"][:, 0]]


def test_the_most_drifting_samples_of_every_feed_in_feed_order():
    feeds = _feeds([16, 16])
    ref, got = _outputs(32, {3: 0.5, 20: 0.9, 30: 0.2, 7: 0.01}, {21: 0.7})
    feed = worst_samples(_model(), feeds, ref, got, {"z": 1})
    assert _samples(feed) == [3, 20, 21, 30]  # 21 drifts in z only, read along z's batch axis
    assert feed["s"] == np.float32(2.0)  # an unbatched input goes whole
    assert len(_samples(feed)) == LAYERWISE_SAMPLES


def test_a_sample_that_breaks_in_the_conversion_alone_comes_first():
    feeds = _feeds([16, 16])
    ref, got = _outputs(32, {1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5})
    got["y"][25, 0] = np.inf
    ref["y"][9, 0] = got["y"][9, 0] = np.nan  # not finite in FP32 too: agreement, no drift
    assert 25 in _samples(worst_samples(_model(), feeds, ref, got, {"z": 1}, count=1))
    assert _samples(worst_samples(_model(), feeds, ref, got, {"z": 1}, count=1)) == [25]


def test_a_static_batch_gets_the_whole_feed_holding_the_worst_sample():
    feeds = _feeds([4, 4, 4], scale=False)
    ref, got = _outputs(12, {9: 1.0, 2: 0.5})
    feed = worst_samples(_model(batch=4, scale=False), feeds, ref, got, {"z": 1})
    assert feed is feeds[2]


@pytest.mark.parametrize("case", ["no batched input", "no per-sample output"])
def test_without_samples_to_rank_the_first_feed(case):
    feeds = _feeds([16, 16])
    ref, got = _outputs(32, {20: 1.0})
    if case == "no batched input":
        model = _model()
        del model.graph.input[0]  # the scalar alone: nothing carries a batch
        feeds = [{"s": f["s"]} for f in feeds]
        assert worst_samples(model, feeds, ref, got, {}) is feeds[0]
    else:
        ref = {"y": ref["y"][:1]}
        assert worst_samples(_model(), feeds, ref, {"y": got["y"][:1]}, {}) is feeds[0]
