"""``trtfarm triton``: model repositories from real TensorRT-RTX plans released into a real store.

TensorRT-RTX plans are served by Triton's Python backend (``model.py`` and trtfarm's loader); made-up TensorRT plans
on the ``tensorrt_plan`` platform, the generated rules and the pinned image's own check: tests/test_triton_load.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from trtfarm.building.build import build_group
from trtfarm.identity import sha256_file
from trtfarm.machine.capabilities import local_capabilities
from trtfarm.modelfile import model_source
from trtfarm.profiles.profile import ProfilesFile, profile_from_args
from trtfarm.project.buildable import buildable_here
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import list_pointers
from trtfarm.releases.moves import move_release
from trtfarm.runtime.plan_files import find_pair
from trtfarm.serving.python_model import MODEL_PY
from trtfarm.serving.triton import TritonRequest, config_spec, triton_repositories
from trtfarm.serving.triton_config import TritonConfigRefused, validated_config
from trtfarm.serving.versions import model_versions
from trtfarm.store import open_store
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.targets import group_by_build, plan_targets

from .conftest import make_model

# the seed article's two regimes, as `trtfarm profiles derive` finds them in its traffic
SHORT = ["input_ids=1x16:32x64:32x128", "attention_mask=1x16:32x64:32x128"]
LONG = ["input_ids=1x129:8x384:16x512", "attention_mask=1x129:8x384:16x512"]
PROFILES = [profile_from_args(SHORT), profile_from_args(LONG)]
RTX = '{flavour: tensorrt_rtx, version: "1.7.1.116", serving_images: [{image: "triton-rtx:1.7", ' \
      'tensorrt_version: "%s"}]}'
GPUS = """\
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-4080: {nvml_name: "NVIDIA GeForce RTX 4080", compute_capability: "8.9", memory_gib: 16, pool: rtx-4080}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
"""


def fleet(tmp_path, targets: str, serving_version: str = "1.7.1.116"):
    path = tmp_path / "gpu_targets.yaml"
    path.write_text(f"version: 1\ntoolchains:\n  rtx-1.7: {RTX % serving_version}\ngpus:\n{GPUS}targets:\n{targets}")
    return path


ONE_CLASS = """\
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx-5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
"""
# an RTX 4080 is 8.9 like the 4090; strict FP32 (tf32 off) there makes a second build with other bytes (an
# optimization level alone does not change a TensorRT-RTX plan), so 8.9 needs two plans
SHARED_CC = """\
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx4080-rtx1.7, gpu: rtx-4080, toolchain: rtx-1.7, release_on: built, settings: {tf32: false}}
"""


def publish(store, fleet_file, folder, seed=0, mtime=1_700_000_000):
    """Build the encoder (weights ``seed``) with the two profiles for every target, as `trtfarm build` does."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(make_model.encoder_model(seed).SerializeToString(deterministic=True))
    os.utime(path, (mtime, mtime))
    model = model_source(path, "encoder")
    plans = plan_targets(model, model.onnx_digest, select_targets(load_fleet(fleet_file)), PROFILES,
                         buildable_here(local_capabilities()))
    return {o.target: o for group in group_by_build(plans) for o in build_group(store, model, group, PROFILES)}


def plan_sha(store, outcome):
    return read_manifest(store, outcome.manifest_key).plan.sha256


def parse(path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def write(store, fleet_file, repo, **kw):
    return triton_repositories(store, load_fleet(fleet_file), TritonRequest("encoder", repo, **kw))


def test_rtx_plans_are_served_by_the_python_backend_each_instance_serving_and_warming_every_profile(store_uri,
                                                                                                  tmp_path):
    store, fleet_file = open_store(store_uri), fleet(tmp_path, ONE_CLASS)
    outcomes = publish(store, fleet_file, tmp_path / "export")
    assert all(o.release.action == "moved" for o in outcomes.values())

    result = write(store, fleet_file, tmp_path / "repo")

    assert [r.path for r in result.repositories] == [tmp_path / "repo"] and result.split == []
    assert result.repositories[0].served_by == "python"
    cfg = parse(tmp_path / "repo/encoder/config.pbtxt")
    assert (cfg.name, cfg.platform, cfg.backend, cfg.max_batch_size) == ("encoder", "", "python", 0)
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in cfg.input] == [
        ("input_ids", "TYPE_INT64", [-1, -1]), ("attention_mask", "TYPE_INT64", [-1, -1])]
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in cfg.output] == [
        ("embeddings", "TYPE_FP32", [-1, 64])]
    # Triton allows `profile` in an instance group on the tensorrt_plan platform only: model.py serves them all
    assert [(g.name, g.count, list(g.profile)) for g in cfg.instance_group] == [("all-profiles", 1, [])]
    assert [(w.name, w.batch_size, {k: list(v.dims) for k, v in w.inputs.items()}) for w in cfg.model_warmup] == [
        ("profile-0-opt", 1, {"input_ids": [32, 64], "attention_mask": [32, 64]}),
        ("profile-1-opt", 1, {"input_ids": [8, 384], "attention_mask": [8, 384]})]
    assert all(v.zero_data for w in cfg.model_warmup for v in w.inputs.values())
    assert not cfg.cc_model_filenames and not cfg.HasField("dynamic_batching")  # model.py picks a plan by GPU
    version = tmp_path / "repo/encoder/1"
    assert (version / "model.py").read_text() == MODEL_PY
    for gpu in ("rtx-4090", "rtx-5090"):
        outcome = outcomes[f"{gpu}-rtx1.7"]
        assert sha256_file(version / f"model.{gpu}.plan") == plan_sha(store, outcome)
        beside = version / f"model.{gpu}.plan.manifest.json"  # the loader's checks read it, byte for byte
        assert beside.read_bytes() == store.get(outcome.manifest_key).data
        assert find_pair(version / f"model.{gpu}.plan")[1].target.gpu == gpu
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["encoder"]  # no scratch left behind
    assert any("engine check pending on the GPU" in n for n in result.repositories[0].notes)


def test_two_rtx_gpus_of_one_capability_with_two_plans_share_one_repository(tmp_path):
    store, fleet_file = open_store((tmp_path / "store").as_uri()), fleet(tmp_path, SHARED_CC)
    outcomes = publish(store, fleet_file, tmp_path / "export")
    assert plan_sha(store, outcomes["rtx4080-rtx1.7"]) != plan_sha(store, outcomes["rtx-4090-rtx1.7"])

    result = write(store, fleet_file, tmp_path / "repo")

    # cc_model_filenames would pick one plan for 8.9; model.py picks each GPU model's own plan
    assert [r.path for r in result.repositories] == [tmp_path / "repo"] and result.split == []
    assert sorted(p.name for p in (tmp_path / "repo/encoder/1").glob("*.plan")) == [
        "model.rtx-4080.plan", "model.rtx-4090.plan"]
    one = write(store, fleet_file, tmp_path / "one", gpus=("rtx-4090",))  # --gpu: that GPU's plans alone
    assert [r.path for r in one.repositories] == [tmp_path / "one"] and one.split == []
    assert [p.name for p in (tmp_path / "one/encoder/1").glob("*.plan")] == ["model.rtx-4090.plan"]


def test_a_rollback_is_a_new_version_and_keep_bounds_the_older_ones(tmp_path):
    store, fleet_file = open_store((tmp_path / "store").as_uri()), fleet(tmp_path, ONE_CLASS)
    old = publish(store, fleet_file, tmp_path / "old", seed=1, mtime=1_700_000_000)
    publish(store, fleet_file, tmp_path / "new", seed=2, mtime=1_800_000_000)
    for target in ("rtx-4090-rtx1.7", "rtx-5090-rtx1.7"):
        key = old[target].manifest_key
        move_release(store, key, read_manifest(store, key), release_on="built", reason="p99", rollback=True)

    result = write(store, fleet_file, tmp_path / "repo")

    model_dir = tmp_path / "repo/encoder"
    assert result.repositories[0].versions == [1, 2, 3]
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "2", "3", "config.pbtxt"]
    plan = "model.rtx-4090.plan"
    assert sha256_file(model_dir / "3" / plan) == sha256_file(model_dir / "1" / plan) == plan_sha(
        store, old["rtx-4090-rtx1.7"])
    assert sha256_file(model_dir / "2" / plan) != sha256_file(model_dir / "3" / plan)

    again = write(store, fleet_file, tmp_path / "repo", keep=1)  # rewritten in place: version 1 goes
    assert again.repositories[0].versions == [2, 3]
    assert sorted(p.name for p in model_dir.iterdir()) == ["2", "3", "config.pbtxt"]


def cli(args, cwd):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_plan_built_with_another_tensorrt_than_its_serving_image_is_refused_by_triton_and_pull(tmp_path):
    store_dir = tmp_path / "store"
    fleet_file = fleet(tmp_path, ONE_CLASS, serving_version="1.7.0.98")
    publish(open_store(store_dir.as_uri()), fleet_file, tmp_path / "export")
    common = ["--store", str(store_dir), "--targets-file", str(fleet_file)]

    served = cli(["triton", "encoder", "--repo", str(tmp_path / "repo"), *common], tmp_path)
    pulled = cli(["pull", "encoder", "--gpu", "rtx-4090", "--toolchain", "tensorrt_rtx-1.7.1.116",
                  "--to", str(tmp_path / "p.plan"), *common], tmp_path)

    for proc in (served, pulled):
        assert proc.returncode == 1, proc.stderr
        line = proc.stderr.strip()
        assert "\n" not in line and "built with tensorrt_rtx 1.7.1.116" in line
        assert "serving image triton-rtx:1.7 carries tensorrt_rtx 1.7.0.98" in line
    assert not (tmp_path / "repo").exists() and not (tmp_path / "p.plan").exists()


def test_the_command_writes_json_and_names_what_it_cannot_verify(tmp_path):
    store_dir = tmp_path / "store"
    fleet_file = fleet(tmp_path, ONE_CLASS)
    publish(open_store(store_dir.as_uri()), fleet_file, tmp_path / "export")
    common = ["--store", str(store_dir), "--targets-file", str(fleet_file), "--repo", str(tmp_path / "repo")]

    doc = json.loads(cli(["triton", "encoder", *common, "--json", "--instances", "3"], tmp_path).stdout)
    assert [g.count for g in parse(tmp_path / "repo/encoder/config.pbtxt").instance_group] == [3]
    text = cli(["triton", "encoder", *common], tmp_path)

    assert doc["split_reasons"] == [] and doc["repositories"][0]["versions"] == [1]
    assert "not verified here: tritonserver loading it on its GPU" in doc["unverified"]
    assert "instances: 3 (--instances)" in doc["repositories"][0]["notes"]
    assert doc["repositories"][0]["served_by"] == "python"
    assert [g.count for g in parse(tmp_path / "repo/encoder/config.pbtxt").instance_group] == [1]
    assert text.returncode == 0 and "not verified here" in text.stderr and 'backend: "python"' in text.stdout
    bad = cli(["triton", "encoder", *common, "--gpu", "h100"], tmp_path)
    assert bad.returncode == 2 and "not in the fleet" in bad.stderr


def test_dynamic_batching_takes_preferred_sizes_from_the_traffic_buckets(tmp_path):
    store, fleet_file = open_store((tmp_path / "store").as_uri()), fleet(tmp_path, ONE_CLASS)
    publish(store, fleet_file, tmp_path / "export")
    traffic = ProfilesFile(profiles=PROFILES, buckets={"input_ids": [1, 16], "attention_mask": [1, 16]})

    result = write(store, fleet_file, tmp_path / "repo", batching="dynamic", traffic=traffic, instances=2)

    cfg = parse(tmp_path / "repo/encoder/config.pbtxt")
    assert cfg.max_batch_size == 16  # the long profile's largest batch: every instance must take a full batch
    assert [list(t.dims) for t in cfg.input] == [[-1], [-1]] and list(cfg.output[0].dims) == [64]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]  # opt batches 32 and 8; 32 exceeds 16
    # the short profile's opt batch (32) is above max_batch_size: its warm-up sends the largest batch Triton takes
    assert [(w.batch_size, list(w.inputs["input_ids"].dims)) for w in cfg.model_warmup] == [(16, [64]), (8, [384])]
    assert [g.count for g in cfg.instance_group] == [2]
    assert any("preferred batch sizes" in n for n in result.repositories[0].notes)
    plain = write(store, fleet_file, tmp_path / "plain", batching="dynamic")
    assert not parse(tmp_path / "plain/encoder/config.pbtxt").dynamic_batching.preferred_batch_size
    assert any("no preferred batch sizes" in n for n in plain.repositories[0].notes)


@pytest.fixture
def written(tmp_path):
    store, fleet_file = open_store((tmp_path / "store").as_uri()), fleet(tmp_path, ONE_CLASS)
    publish(store, fleet_file, tmp_path / "export")
    write(store, fleet_file, tmp_path / "repo")
    # the spec the command checked its config against, from the released manifests
    versions = model_versions(list_pointers(store, "encoder"))
    ms = [read_manifest(store, k) for _, k in sorted(versions[-1].manifests.items())]
    spec = config_spec(TritonRequest("encoder", tmp_path / "repo"), ms, [])
    return (tmp_path / "repo/encoder/config.pbtxt").read_text(), spec


@pytest.mark.parametrize("wrong, refusal", [
    (("instance_group [", "instance_groups ["), "has no field named \"instance_groups\""),
    (("data_type: TYPE_FP32", "data_type: TYPE_FLOAT32"), "TYPE_FLOAT32"),
    (("dims: [ -1, 64 ]", "dims: [ -1, 65 ]"), "output 'embeddings' has dims [-1, 65]; the plan's are [-1, 64]"),
    (("dims: [ 8, 384 ]", "dims: [ 8, 640 ]"), "profile 1's opt is [8, 384]"),
    (("dims: [ 8, 384 ]", "dims: [ 8, 640 ]"), "the instances of ['all-profiles'] do not take"),
    (('backend: "python"', 'platform: "tensorrt_plan"'), "cannot run tensorrt_rtx plans; backend 'python' does"),
    (("kind: KIND_GPU }", 'kind: KIND_GPU profile: [ "0" ] }'), "Triton allows that on the tensorrt_plan platform"),
    (("max_batch_size: 0", "max_batch_size: 0\ndynamic_batching { preferred_batch_size: [ 8 ] }"),
     "preferred_batch_size [8] outside 1..max_batch_size 0"),
    (("batch_size: 1", "batch_size: 4"), "has batch_size 4; Triton takes 1..1"),
])
def test_every_config_parses_with_tritons_schema_and_a_wrong_field_is_refused(written, wrong, refusal):
    text, spec = written
    assert validated_config(text, spec).name == "encoder"
    assert wrong[0] in text
    with pytest.raises(TritonConfigRefused) as info:
        validated_config(text.replace(wrong[0], wrong[1], 1), spec)
    assert refusal in str(info.value)
