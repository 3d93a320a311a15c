"""The failures that real exports found, each on a corpus model (tests/corpus): they all failed on the old main.

1. Paddle2ONNX writes a dynamic dimension as ``dim_value: -1``: it is dynamic, as in TensorRT's parser.
2. The FP16 gate of a Paddle2ONNX detector watched its ``Constant`` outputs for overflow (onnxruntime cannot return
   them) and ended in a Polygraphy traceback; what goes wrong in a comparison is one line.
3. The build digest covered only initializers' external data: a weight kept in a ``Constant`` node's external data
   could change and the plan stayed "up to date".
4. ``trtfarm models push`` uploaded ``model.onnx`` without its ``weights.bin``; a worker got a model without weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from trtfarm.errors import UserInputError
from trtfarm.identity import onnx_digest
from trtfarm.onnxfile import all_tensors, onnx_inputs
from trtfarm.precision.recipe import GateError
from trtfarm.precision.runs import infer, low_precision_tensors
from trtfarm.profiles.profile import check_profiles_against_inputs, profile_from_args

from . import forkcli
from .corpus.matrix import plain_build
from .corpus.sources import corpus_file
from .fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]
SQUARE = ["x=1x3x48x48:8x3x48x48:32x3x48x48"]  # the classifier's "?" height and width are one size to TensorRT


def run(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    done = forkcli.trtfarm(args, cwd=cwd, env=env, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    if check and done.returncode:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    return tmp_path


def test_a_minus_one_dimension_is_dynamic_and_the_paddle_classifier_builds(workdir):
    cls = corpus_file("ppocr-cls")
    assert onnx_inputs(cls) == {"x": (None, 3, "?", "?")}
    check_profiles_against_inputs([profile_from_args(SQUARE)], onnx_inputs(cls))
    assert plain_build(cls, SQUARE).outcome == "built"  # the referee
    rows = json.loads(run(workdir, "build", str(cls), "--name", "cls", *(f"--profile={p}" for p in SQUARE),
                          "--json").stdout)
    assert [r["status"] for r in rows] == ["built"]


def test_dims_that_share_a_name_must_share_an_opt_as_the_builder_says(workdir):
    cls = corpus_file("ppocr-cls")
    wide = ["x=1x3x48x192:8x3x48x192:32x3x48x192"]
    plain = plain_build(cls, wide)
    assert plain.outcome == "refused" and "Input dimensions with this name" in plain.detail
    refused = run(workdir, "build", str(cls), "--name", "cls", f"--profile={wide[0]}", check=False)
    assert refused.returncode == 2
    assert "dimension 3 and dimension 2 are both named '?'" in refused.stderr
    assert "give them the same opt, or give the dimensions distinct names" in refused.stderr


def test_the_fp16_gate_of_a_paddle_detector_watches_only_computed_tensors(tmp_path):
    det = corpus_file("ppocr-det")
    done = run(tmp_path, "precision", str(det), "--mode", "fp16", "--out", str(tmp_path / "det16.onnx"), "--json",
               check=False)
    # its one output carries no signal on generated inputs: not judged (exit 4), naming the output, not passed
    gate = json.loads(done.stdout)["gate"]
    assert (done.returncode, gate["verdict"]) == (4, "not judged") and "sigmoid_0.tmp_0" in gate["note"], gate
    converted = onnx.load(str(tmp_path / "det16.onnx"), load_external_data=False)
    constants = {t for n in converted.graph.node if n.op_type == "Constant" for t in n.output}
    watched = low_precision_tensors(tmp_path / "det16.onnx")
    assert watched and not constants & set(watched)


def test_a_model_onnxruntime_cannot_run_is_one_line_naming_the_model(tmp_path):
    det = corpus_file("ppocr-det")
    feed = {"x": np.zeros((1, 3, 32), np.float32)}  # rank 3 for a rank-4 input
    with pytest.raises(GateError) as failed:
        infer(det, [feed], keep=False)
    message = str(failed.value)
    assert str(det) in message and "onnxruntime could not run the model" in message and "\n" not in message


def _external_copy(src: Path, folder: Path) -> Path:
    """The model saved with every tensor, Constant values included, in ``weights.bin`` beside it."""
    folder.mkdir(parents=True)
    model = onnx.load(str(src))
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0, convert_attribute=True)
    return folder / "model.onnx"


def _constant_in_weights(path: Path) -> tuple[str, int, np.ndarray]:
    """A float Constant kept in weights.bin: its name, byte offset there, and its values."""
    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        t = node.attribute[0].t if node.op_type == "Constant" and node.attribute else None
        if t is not None and t.data_location == onnx.TensorProto.EXTERNAL and t.data_type == onnx.TensorProto.FLOAT:
            info = {e.key: e.value for e in t.external_data}
            values = numpy_helper.to_array(t, base_dir=str(path.parent))
            return node.name, int(info.get("offset", 0)), values
    raise AssertionError("no float Constant in external data")


def test_the_build_digest_covers_constants_kept_in_external_data(workdir):
    # Paddle2ONNX writes the recognizer's weights as Constant nodes: saved with external data, they are in weights.bin
    model = _external_copy(corpus_file("ppocr-rec"), workdir / "export")
    profile = "--profile=x=1x3x48x160:4x3x48x320:8x3x48x640"
    first = json.loads(run(workdir, "build", str(model), "--name", "rec", profile, "--json").stdout)[0]
    manifest = json.loads((workdir / "trtfarm-store" / first["manifest"].split("trtfarm-store/", 1)[1]).read_text())
    names = [f["name"] for f in manifest["model"]["files"]]
    assert names == ["model.onnx", "weights.bin"]
    assert all(len(f["sha256"]) == 64 for f in manifest["model"]["files"])
    before = onnx_digest(model)
    name, offset, values = _constant_in_weights(model)
    with open(model.parent / "weights.bin", "r+b") as f:  # a new value for one Constant, nothing else changes
        f.seek(offset)
        f.write((values * 1.5 + 0.25).astype(np.float32).tobytes())
    assert onnx_digest(model) != before, f"changing Constant {name} left the digest as it was"
    again = json.loads(run(workdir, "build", str(model), "--name", "rec", profile, "--json").stdout)
    assert [r["status"] for r in again] == ["built"]


def test_an_external_data_location_outside_the_folder_is_refused(workdir):
    model = _external_copy(corpus_file("ppocr-det"), workdir / "export")
    shutil.move(model.parent / "weights.bin", workdir / "weights.bin")
    doc = onnx.load(str(model), load_external_data=False)
    for t in (x for x in all_tensors(doc) if x.data_location == onnx.TensorProto.EXTERNAL):
        for e in t.external_data:
            if e.key == "location":
                e.value = "../weights.bin"
    onnx.save(doc, str(model))
    with pytest.raises(UserInputError, match=r"'\.\./weights\.bin', outside the model's folder"):
        onnx_digest(model)
    refused = run(workdir, "models", "push", str(model.parent), "--name", "det", "--store",
                  (workdir / "store").as_uri(), check=False)
    assert refused.returncode == 2 and "outside the model's folder" in refused.stderr
    assert not (workdir / "store").exists() or not list((workdir / "store").rglob("*.onnx"))


def test_models_push_uploads_the_external_data_and_a_worker_fetches_it(workdir, store_uri):
    from trtfarm.publishing.registry import local_copy, resolve_model
    from trtfarm.store import open_store

    model = _external_copy(corpus_file("ppocr-det"), workdir / "export")
    (model.parent / "farm.yaml").write_text("name: det\nprofiles:\n  - x: 1x3x320x320:1x3x640x640:1x3x960x960\n")
    pushed = json.loads(run(workdir, "models", "push", str(model.parent), "--store", store_uri, "--json").stdout)
    store = open_store(store_uri)
    ref = resolve_model(store, "det")
    record = json.loads(store.get(f"{ref.uri.split(store_uri.rstrip('/') + '/', 1)[1]}/export.json").data)
    assert set(record["files"]) == {"model.onnx", "weights.bin", "farm.yaml"}, pushed
    assert record["onnx_digest"] == onnx_digest(model)
    fetched = local_copy(ref)
    assert (fetched.parent / "weights.bin").read_bytes() == (model.parent / "weights.bin").read_bytes()
    assert onnx_digest(fetched) == onnx_digest(model)


@pytest.mark.parametrize("name", ["bert-dynamo", "resnet-dynamo"])
def test_a_dynamo_export_keeps_its_weights_beside_it_and_the_digests_see_them(tmp_path, name):
    from trtfarm.identity import graph_digest, model_files

    from .corpus.exported import exported_model

    src = exported_model(name)
    shutil.copytree(src.parent, tmp_path / name)
    model = tmp_path / name / "model.onnx"
    assert [n for n, _ in model_files(model)] == ["model.onnx", "model.onnx.data"]
    before, graph = onnx_digest(model), graph_digest(model)
    data = bytearray((model.parent / "model.onnx.data").read_bytes())
    data[64:68] = np.float32(0.5).tobytes()
    (model.parent / "model.onnx.data").write_bytes(bytes(data))
    assert onnx_digest(model) != before  # new weights: a new model
    assert graph_digest(model) == graph  # the same graph: a refit can take them
