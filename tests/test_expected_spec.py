"""A registered export's build spec as planning reads it: farm.yaml in one GET, checked against export.json."""

from __future__ import annotations

import pytest

from trtfarm import layout
from trtfarm.project.spec_file import spec_for_model
from trtfarm.publishing.registry import register_export
from trtfarm.state.expected import expected_exports
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import open_store

from .fleet_store import encoder_export
from .store_requests import Tally, _open, counting


@pytest.fixture
def registered(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TRTFARM_CACHE_DIR", str(tmp_path / "cache"))
    folder = encoder_export(tmp_path / "export", 0)
    store = open_store((tmp_path / "store").as_uri())
    ref = register_export(store, folder)
    return store, ref, folder


def test_the_spec_is_read_in_one_request_and_says_what_farm_yaml_says(registered):
    store, ref, folder = registered
    spec, _ = spec_for_model(folder / "model.onnx")
    tally = Tally()
    with counting(tally):
        x = expected_exports(StoreSurvey(_open(store.uri)), ["encoder"])["encoder"]
    assert x.damaged is None and x.unknown is None, x
    assert x.recipe == spec.precision.mode and x.export_id == ref.export_id
    assert x.profiles and len(x.profiles) == len(spec.profiles), x.profiles
    reads = tally.by_method()  # export.json and farm.yaml (the model is not fetched)
    assert reads.get("get", 0) == 2 and not reads.get("download_file"), reads


def test_a_farm_yaml_rewritten_in_the_store_is_damaged_not_read(registered):
    store, ref, _ = registered
    key = layout.export_file_key(layout.export_prefix("encoder", ref.export_id), "farm.yaml")
    store.compare_and_swap(key, b"name: encoder\nprecision: fp16\n", store.get(key).etag)
    x = expected_exports(StoreSurvey(store), ["encoder"])["encoder"]
    assert x.damaged and "sha256" in x.damaged, x
    assert x.recipe == "?" and x.converted_digest is None, x
