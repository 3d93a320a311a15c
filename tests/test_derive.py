"""Profiles from traffic: the seed article's textbook case, one regime, caps, budgets and static dims."""

from __future__ import annotations

import numpy as np
import pytest

from trtfarm.errors import UserInputError
from trtfarm.profiles.derive import Constraints, derive_profiles, onnx_activation_bytes
from trtfarm.profiles.shapelog import read_shape_log

from .conftest import make_traffic

CAPS = Constraints(caps={("input_ids", 1): 512, ("attention_mask", 1): 512}, max_batch=32)


def texts(d):
    return [{n: r.text() for n, r in p.profile.root.items()} for p in d.profiles]


def test_the_synthetic_log_has_the_textbook_statistics():
    batch, length = make_traffic.synthetic_traffic(200_000, seed=0)
    assert 62 <= np.median(length) <= 66 and 370 <= np.percentile(length, 99) <= 400
    assert length.max() == 512 and batch.max() == 32


def test_textbook_case_gives_a_short_and_a_long_profile(textbook_log):
    d = derive_profiles(read_shape_log(textbook_log), CAPS)
    assert texts(d) == [
        {"input_ids": "1x16:32x64:32x128", "attention_mask": "1x16:32x64:32x128"},
        {"input_ids": "1x129:8x384:16x512", "attention_mask": "1x129:8x384:16x512"},
    ]
    short, long = d.profiles
    assert short.share > 0.97 and 0.01 < long.share < 0.03 and d.split_axis == "input_ids[1]"
    assert 0 < short.padding_overhead < 0.2 and 0 <= long.padding_overhead < 0.05
    assert d.alternatives[1]["score"] < 0.75 * d.alternatives[0]["score"]


def test_memory_estimates_from_the_model_keep_the_layout_and_rank_the_profiles(textbook_log, example_onnx):
    d = derive_profiles(read_shape_log(textbook_log), CAPS, onnx_activation_bytes(example_onnx))
    assert len(d.profiles) == 2 and texts(d)[1]["input_ids"] == "1x129:8x384:16x512"
    short, long = (p.activation_bytes for p in d.profiles)
    single = onnx_activation_bytes(example_onnx)({"input_ids": [32, 512], "attention_mask": [32, 512]})
    assert 0 < short < long < single  # each context of either profile reserves less than one wide profile's


def test_one_regime_gives_one_profile(tmp_path):
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.normal(100, 10, 50_000), 60, 140).round().astype(int)
    p = tmp_path / "s.jsonl"
    make_traffic.write_jsonl(p, np.full(len(lengths), 8), lengths)
    d = derive_profiles(read_shape_log(p))
    assert texts(d) == [{"input_ids": "8x64:8x112:8x144", "attention_mask": "8x64:8x112:8x144"}]
    assert d.split_axis is None


def test_caps_reject_what_is_beyond_them_and_bound_the_top_profile(textbook_log):
    c = Constraints(caps={("input_ids", 1): 256, ("attention_mask", 1): 256})
    d = derive_profiles(read_shape_log(textbook_log), c)
    assert d.rejected > 3000
    assert all(p.profile.root["input_ids"].max[1] <= 256 for p in d.profiles)


def test_a_token_budget_caps_every_profile_and_shrinks_the_long_batch(textbook_log):
    d = derive_profiles(read_shape_log(textbook_log), Constraints(max_tokens=4096))
    maxima = [p.profile.root["input_ids"].max for p in d.profiles]
    assert all(b * s <= 4096 for b, s in maxima) and maxima[-1] == [8, 512]


def test_static_dimensions_stay_fixed(tmp_path):
    p = tmp_path / "img.jsonl"
    p.write_text("".join(f'{{"pixels": [{b}, 3, 224, 224]}}\n' for b in (1, 4, 8, 8, 8, 16, 2)))
    d = derive_profiles(read_shape_log(p))
    assert texts(d) == [{"pixels": "1x3x224x224:8x3x224x224:16x3x224x224"}]


def test_a_cap_on_an_unknown_dimension_is_refused(textbook_log):
    with pytest.raises(UserInputError, match="does not have; its dims are"):
        derive_profiles(read_shape_log(textbook_log), Constraints(caps={("token_ids", 1): 512}))


def test_the_columnar_and_the_line_by_line_reader_derive_the_same_profiles(textbook_log):
    from trtfarm.profiles.shapelog import read_columnar, read_line_by_line

    fast, slow = derive_profiles(read_columnar(textbook_log), CAPS), derive_profiles(read_line_by_line(textbook_log),
                                                                                     CAPS)
    assert texts(fast) == texts(slow) and fast.records == slow.records == 200_000
    assert [p.share for p in fast.profiles] == [p.share for p in slow.profiles]
