"""Shared fixtures: the example model, fleets, and real servers (moto's S3 on 127.0.0.1)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
# No test may lean on Prefect's ephemeral server (it starts slowly and fails on a busy machine): anything that talks
# to Prefect runs against a real `prefect server start` (tests/farm_server.py); without one, Prefect refuses to run.
os.environ["PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"] = "false"

try:  # the long run of the ledger's property tests: `pytest tests/releases --hypothesis-profile long`
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("long", max_examples=1000, stateful_step_count=40, deadline=None)
except ImportError:  # hypothesis is a test dependency; a bare install has no property tests to run
    pass


# The suite runs on pytest-xdist's workers (pyproject.toml's addopts), each test module on one worker (--dist
# loadfile), so that its module-scoped fixtures (farm servers, built stores) are made once and its tests run in their
# order. FIRST are the longest modules (by a full run's durations, longest first), started before the rest so that
# none of them is left to run alone at the end (--no-loadscope-reorder: else xdist hands out the modules with the
# most tests first, the one-test ones last). The docs' blocks lead: they share the venvs the first of them make.
FIRST = ("tests/docs_blocks/test_readme_farm.py", "tests/docs_blocks/test_precision_profiles_serving.py",
         "tests/docs_blocks/test_quick_start_blocks.py", "tests/test_conformance.py",
         "tests/test_conformance_rows.py", "tests/store/test_one_story.py", "tests/flows/test_lost_hosts.py",
         "tests/flows/test_farm.py", "tests/test_benches_installs.py", "tests/test_conformance_families.py",
         "tests/test_benches_farm.py", "tests/test_benches.py", "tests/test_attack_matrix.py",
         "tests/test_environment_values.py", "tests/flows/test_dispatch_faults.py", "tests/test_cachedir.py",
         "tests/test_cli.py", "tests/test_faults.py", "tests/flows/test_promote.py",
         "tests/precision/test_workarounds.py", "tests/test_wheel_install.py", "tests/test_local_build.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        module = item.nodeid.split("::", 1)[0]
        return FIRST.index(module) if module in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: each module's tests stay together and in their order


def _load(name):
    """Import one of the example scripts (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / f"examples/encoder/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_model = _load("make_model")
make_traffic = _load("make_traffic")


@pytest.fixture(scope="session")
def example_dir(tmp_path_factory) -> Path:
    """A model export folder: the example encoder (seed 0) and its farm.yaml."""
    d = tmp_path_factory.mktemp("export") / "encoder"
    d.mkdir()
    (d / "model.onnx").write_bytes(make_model.encoder_model(0).SerializeToString(deterministic=True))
    shutil.copy(REPO / "examples/encoder/farm.yaml", d / "farm.yaml")
    return d


@pytest.fixture(scope="session")
def example_onnx(example_dir) -> Path:
    return example_dir / "model.onnx"


ENCODER_PROFILE = ["input_ids=1x16:16x128:32x512", "attention_mask=1x16:16x128:32x512"]

RTX_FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
  rtx-3090: {nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}
  h100: {nvml_name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0", memory_gib: 80, pool: gpu-h100}
targets:
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7}
  - {id: rtx-5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7}
  - {id: rtx3090-rtx1.7-o5, gpu: rtx-3090, toolchain: rtx-1.7, settings: {optimization_level: 5}}
  - {id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}
"""


@pytest.fixture
def fleet_file(tmp_path) -> Path:
    """Three RTX targets (two share one build) and one TensorRT target this machine cannot serve."""
    p = tmp_path / "gpu_targets.yaml"
    p.write_text(RTX_FLEET)
    return p


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 (a real HTTP endpoint), with AWS settings pointed at it.

    Its object writes are serialised (tests/moto_serialised.py says why): moto checks If-Match / If-None-Match and
    writes later with no lock, so concurrent compare-and-swap tests would lose updates that S3 never loses.
    """
    from tests.moto_serialised import SerialisedMotoServer

    server = SerialisedMotoServer("127.0.0.1", 0)
    server.start()
    url = server.url
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": url}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield url
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_uri(s3_endpoint) -> str:
    """A fresh bucket on the moto server, as an s3:// store URI with a prefix."""
    import boto3

    bucket = f"plans-{uuid.uuid4().hex[:10]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/farm"


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    """Each store test runs against file:// and against moto's S3 server."""
    if request.param == "file":
        return (tmp_path / "store").as_uri()
    return request.getfixturevalue("s3_uri")


@pytest.fixture(scope="session")
def textbook_log(tmp_path_factory) -> Path:
    """200,000 batches of the seed article's two-regime encoder traffic."""
    path = tmp_path_factory.mktemp("traffic") / "shapes.jsonl"
    make_traffic.write_jsonl(path, *make_traffic.synthetic_traffic(200_000, seed=0))
    return path


# A model that overflows FP16 only at real input magnitudes (pixels 0..255): fc2 reaches ~3e5.
def write_overflow_model(d):
    """Write the model and 64 held-out samples to folder ``d``; return their paths."""
    rng = np.random.default_rng(0)

    def w(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = [numpy_helper.from_array(w(64, 64, scale=4.0), "w1"), numpy_helper.from_array(w(64, 64, scale=4.0), "w2"),
             numpy_helper.from_array(np.array(1e-4, np.float32), "scale"),
             numpy_helper.from_array(w(64, 10, scale=0.3), "w3")]
    n = helper.make_node
    nodes = [n("MatMul", ["pixels", "w1"], ["h1"], name="fc1"), n("Relu", ["h1"], ["a1"], name="relu1"),
             n("MatMul", ["a1", "w2"], ["h2"], name="fc2"), n("Mul", ["h2", "scale"], ["h2s"], name="rescale"),
             n("Relu", ["h2s"], ["a2"], name="relu2"), n("MatMul", ["a2", "w3"], ["logits"], name="head")]
    inputs = [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["b", 64])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 10])]
    graph = helper.make_graph(nodes, "overflow", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(d / "model.onnx"))
    np.savez(d / "heldout.npz", pixels=rng.uniform(0, 255, (64, 64)).astype(np.float32))
    return d / "model.onnx", d / "heldout.npz"


@pytest.fixture(scope="session")
def overflow_model(tmp_path_factory):
    return write_overflow_model(tmp_path_factory.mktemp("overflow"))


@pytest.fixture(scope="session")
def encoder_calib(tmp_path_factory, example_onnx):
    """Calibration data for the example encoder: realistic padding masks, ids in its vocabulary."""
    from trtfarm.precision.inputs import generate_inputs

    path = tmp_path_factory.mktemp("calib") / "calib.npz"
    np.savez(path, **generate_inputs(onnx.load(str(example_onnx)), samples=64, seq=64, seed=3))
    return path


@pytest.fixture(autouse=True)
def _private_release_memory(tmp_path_factory, monkeypatch):
    """Each test's serving host remembers accepted releases in a folder of its own, never ~/.local/state."""
    monkeypatch.setenv("TRTFARM_RELEASE_STATE", str(tmp_path_factory.mktemp("host-state") / "accepted.json"))


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """A headless Chromium for the page tests (tests/browser.py), one per module."""
    from .browser import Chromium

    browser = Chromium(tmp_path_factory.mktemp("browser"))
    try:
        yield browser
    finally:
        browser.close()
