"""Content addresses: what changes each digest and what does not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from trtfarm.errors import UserInputError
from trtfarm.identity import build_digest, graph_digest, onnx_digest
from trtfarm.layout import plan_prefix, release_key

from .conftest import make_model


@pytest.fixture
def two_exports(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(make_model.encoder_model(0).SerializeToString(deterministic=True))
    b.write_bytes(make_model.encoder_model(1).SerializeToString(deterministic=True))
    return a, b


def test_new_weights_change_the_onnx_digest_but_not_the_graph_digest(two_exports):
    a, b = two_exports
    assert onnx_digest(a) != onnx_digest(b)
    assert graph_digest(a) == graph_digest(b)


def test_a_graph_change_changes_the_graph_digest(two_exports, tmp_path):
    a, _ = two_exports
    model = onnx.load(str(a))
    next(n for n in model.graph.node if n.op_type == "Relu").op_type = "Sigmoid"
    c = tmp_path / "c.onnx"
    onnx.save(model, str(c))
    assert graph_digest(c) != graph_digest(a)


def test_a_weight_shape_change_changes_the_graph_digest(two_exports, tmp_path):
    a, _ = two_exports
    model = onnx.load(str(a))
    init = next(i for i in model.graph.initializer if i.name == "tok_emb")
    init.CopyFrom(numpy_helper.from_array(np.zeros((1001, 64), np.float32), "tok_emb"))
    c = tmp_path / "c.onnx"
    onnx.save(model, str(c))
    assert graph_digest(c) != graph_digest(a)


def test_external_data_is_part_of_the_onnx_digest(tmp_path):
    model = make_model.encoder_model(0)
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=1024)
    before = onnx_digest(path)
    data = bytearray((tmp_path / "ext.data").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "ext.data").write_bytes(bytes(data))
    assert onnx_digest(path) != before
    assert graph_digest(path) == graph_digest(path)


BASE = dict(converted_onnx_digest="a" * 64, profiles=[{"x": {"min": [1], "opt": [2], "max": [4]}}],
            settings={"workspace_mib": 4096}, flavour="tensorrt", toolchain_version="11.4.0.106", compat_class="h100")


CHANGES = [
    ("converted_onnx_digest", "b" * 64), ("profiles", [{"x": {"min": [1], "opt": [3], "max": [4]}}]),
    ("settings", {"workspace_mib": 2048}), ("flavour", "tensorrt_rtx"), ("toolchain_version", "10.16.1.11"),
    ("compat_class", "l4"),
]


@pytest.mark.parametrize("field, value", CHANGES)
def test_every_plan_input_changes_the_build_digest(field, value):
    assert build_digest(**{**BASE, field: value}) != build_digest(**BASE)


def test_build_digest_is_independent_of_key_order():
    reordered = {**BASE, "settings": {"b": 1, "a": 2}}
    assert build_digest(**reordered) == build_digest(**{**BASE, "settings": {"a": 2, "b": 1}})


def test_keys_follow_the_design_layout_and_refuse_traversal():
    assert plan_prefix("enc", "0" * 64, "h100", "tensorrt-11.4.0.106", "f" * 64) == \
        "plans/enc/000000000000/h100/tensorrt-11.4.0.106/ffffffffffff"
    assert release_key("enc", "h100", "tensorrt-11.4.0.106") == "releases/enc/h100/tensorrt-11.4.0.106.json"
    for bad in ("..", "a/b", "", "x" * 200):
        with pytest.raises(UserInputError, match="not a valid name"):
            plan_prefix(bad, "0" * 64, "h100", "t", "f" * 64)


@pytest.mark.parametrize("field,value", [(None, None), *CHANGES])
def test_the_build_digest_is_the_sha256_of_its_canonical_json_document(field, value):
    import hashlib

    from trtfarm.identity import canonical_json

    given = {**BASE, **({field: value} if field else {})}
    given["settings"] = {"ü": "é", **given["settings"]}  # keys sorted, text as UTF-8 (not escaped)
    doc = {"onnx": given["converted_onnx_digest"], "profiles": given["profiles"], "settings": given["settings"],
           "toolchain": {"flavour": given["flavour"], "version": given["toolchain_version"]},
           "compat_class": given["compat_class"]}
    assert build_digest(**given) == hashlib.sha256(canonical_json(doc)).hexdigest()


def test_the_files_of_a_model_are_found_without_parsing_it_exactly_as_by_parsing_it(tmp_path, monkeypatch):
    """A file without the bytes ``location`` cannot name an external data file; any other file is parsed. Every
    model the onnx wheel ships, each also saved with its weights outside, and words split across read chunks."""
    import importlib.util
    from pathlib import Path

    from trtfarm import identity
    from trtfarm.onnxfile import load_model

    root = Path(importlib.util.find_spec("onnx").submodule_search_locations[0])
    models = sorted(root.rglob("*.onnx"))
    for i, path in enumerate(models[::10]):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        model = onnx.load(str(path))
        onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="weights.bin",
                  size_threshold=0)
        models.append(folder / "model.onnx")
    noted = tmp_path / "noted.onnx"  # "location" in a doc string, no external data
    noted_model = make_model.encoder_model(0)
    noted_model.doc_string = "weights in this file, at no other location"
    noted.write_bytes(noted_model.SerializeToString())
    models.append(noted)
    monkeypatch.setattr(identity, "CHUNK", 4099)  # the word crosses chunk edges somewhere
    parses = []
    monkeypatch.setattr(identity, "load_model", lambda p: parses.append(p) or load_model(p))
    externals = 0
    for path in models:
        parsed = identity.model_files(path, load_model(path))
        assert identity.model_files(path) == parsed, path
        externals += len(parsed) > 1
    assert externals >= 5
    assert parses == [p for p in models if b"location" in p.read_bytes()] and noted in parses
