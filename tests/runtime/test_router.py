"""The router at the API edge: every logged shape lands in a profile that holds it; the rest get a clear error."""

from __future__ import annotations

import pytest

from trtfarm.profiles.derive import derivation_file, derive_profiles, write_profiles_file
from trtfarm.profiles.profile import profile_from_args
from trtfarm.profiles.shapelog import read_shape_log
from trtfarm.runtime import Router, ShapeOutOfRange

from ..test_derive import CAPS


@pytest.fixture(scope="module")
def derived(textbook_log, tmp_path_factory):
    table = read_shape_log(textbook_log)
    path = tmp_path_factory.mktemp("profiles") / "profiles.yaml"
    write_profiles_file(derivation_file(derive_profiles(table, CAPS), str(textbook_log)), path)
    return table, path


def test_every_logged_shape_routes_to_a_profile_that_holds_it(derived):
    table, path = derived
    router = Router.from_file(path)
    used = set()
    for row in table.rows.tolist():
        shapes = {"input_ids": row[0:2], "attention_mask": row[2:4]}
        route = router.route(shapes)
        profile = router.profiles[route.profile]
        used.add(route.profile)
        for name, padded in route.shapes.items():
            assert profile.root[name].contains(padded)
            assert all(p >= v for p, v in zip(padded, shapes[name], strict=True))
            assert padded[1] % 16 == 0 or padded[1] == profile.root[name].max[1]
            assert padded[0] == shapes[name][0]  # batch is not padded
        assert route.shapes["input_ids"] == route.shapes["attention_mask"]
    assert used == {0, 1}


def test_short_requests_go_to_the_short_profile_and_pad_to_buckets(derived):
    router = Router.from_file(derived[1])
    assert router.route({"input_ids": [16, 87], "attention_mask": [16, 87]}).shapes["input_ids"] == (16, 96)
    assert router.route({"input_ids": [3, 5], "attention_mask": [3, 5]}).shapes["input_ids"] == (3, 16)
    long = router.route({"input_ids": [3, 130], "attention_mask": [3, 130]})
    assert long.profile == 1 and long.shapes["input_ids"] == (3, 144)


@pytest.mark.parametrize("shapes, words", [
    ({"input_ids": [1, 600], "attention_mask": [1, 600]}, ["input_ids dim 1 = 600 exceeds the largest maximum 512"]),
    ({"input_ids": [40, 16], "attention_mask": [40, 16]}, ["dim 0 = 40 exceeds the largest maximum 32"]),
    ({"input_ids": [17, 500], "attention_mask": [17, 500]}, ["no single profile holds every dimension"]),
    ({"input_ids": [1, 2, 3], "attention_mask": [1, 2]}, ["input_ids has rank 3"]),
    ({"input_ids": [1, 16]}, ["do not match the engine's"]),
])
def test_out_of_range_requests_get_a_clear_error(derived, shapes, words):
    router = Router.from_file(derived[1])
    with pytest.raises(ShapeOutOfRange) as err:
        router.route(shapes)
    for w in words:
        assert w in str(err.value)


def test_hand_written_profiles_route_without_buckets():
    router = Router([profile_from_args(["x=1x8:4x8:8x8"])])
    assert router.route({"x": [3, 8]}).shapes == {"x": (3, 8)}
