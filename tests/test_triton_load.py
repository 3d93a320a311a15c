"""Triton repositories that load: the backend fits the plans' toolchain, warm-ups fit every instance group.

Given plans of both toolchains (made-up TensorRT plans and TensorRT-RTX ones, published and released through the
real protocol; and manifests generated with 1-3 profiles for the rules), when ``trtfarm triton`` writes their
repository, then the config parses with Triton's schema (``model_config_pb2``), a TensorRT plan is served by the
``tensorrt_plan`` platform and a TensorRT-RTX plan by the Python backend (no ``profile`` in its instance groups: Triton
allows that on ``tensorrt_plan`` only), and every warm-up is taken by every instance group (Triton runs each warm-up
on every instance and fails the load when one fails). The command's own lines fit 80 columns and are few.

Where Docker and the pinned tritonserver image are here (``docker image inspect`` succeeds), the image's own model
loading reads the written repositories too; elsewhere that test is skipped with the reason, and the checks above run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.profiles.profile import profiles_json
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.publish import publish_plan
from trtfarm.releases.moves import move_release
from trtfarm.serving.python_model import REQUIREMENTS
from trtfarm.serving.triton import TritonRequest, config_spec, triton_repositories
from trtfarm.serving.triton_config import config_text
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import manifest_from_json

from .test_triton import ONE_CLASS, PROFILES, fleet, publish

TEMPLATE = Path(__file__).parent / "data" / "manifest_encoder_rtx4090.json"
PINNED_IMAGE = "nvcr.io/nvidia/tritonserver:26.10-py3"  # the serving image tests/fleet_store.py declares
TOOLCHAINS = {"tensorrt": ("11.4.0.106", b"ftrt"), "tensorrt_rtx": ("1.7.1.116", b"vtrt")}
GPUS = {"h100": ("NVIDIA H100 80GB HBM3", "9.0"), "l4": ("NVIDIA L4", "8.9"), "l40s": ("NVIDIA L40S", "8.9"),
        "rtx-4090": ("NVIDIA GeForce RTX 4090", "8.9")}
FLEET = """\
version: 1
toolchains:
  trt-11.4: {flavour: tensorrt, version: "11.4.0.106"}
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  h100: {nvml_name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0", memory_gib: 80, pool: gpu-h100}
  l4: {nvml_name: "NVIDIA L4", compute_capability: "8.9", memory_gib: 24, pool: gpu-l4}
  l40s: {nvml_name: "NVIDIA L40S", compute_capability: "8.9", memory_gib: 48, pool: gpu-l40s}
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
targets:
  - {id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}
  - {id: l4-trt11.4, gpu: l4, toolchain: trt-11.4}
  - {id: l40s-trt11.4, gpu: l40s, toolchain: trt-11.4}
  - {id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
"""


def manifest(flavour: str, gpu: str, profiles: list[dict], plan=None):
    """The template manifest for ``gpu`` with ``flavour``'s toolchain and ``profiles``."""
    t = manifest_from_json(TEMPLATE.read_bytes())
    name, cc = GPUS[gpu]
    target = t.target.model_copy(update={"gpu": gpu, "gpu_name": name, "compute_capability": cc, "flavour": flavour,
                                         "toolchain_version": TOOLCHAINS[flavour][0], "target_id": f"{gpu}-x"})
    update = {"target": target, "build": t.build.model_copy(update={"profiles": profiles})}
    return t.model_copy(update=update | ({"plan": plan} if plan else {}))


def release_made_up(store, folder: Path, gpu: str, flavour: str) -> None:
    """Publish and release a made-up plan of ``flavour`` for ``gpu`` (its header real, its body not a plan)."""
    version, magic = TOOLCHAINS[flavour]
    plan = folder / f"{gpu}.plan"
    plan.write_bytes(magic + bytes(20) + bytes(int(v) for v in version.split(".")) + gpu.encode() * 100)
    m = manifest(flavour, gpu, profiles_json(PROFILES))
    m = m.model_copy(update={"build": m.build.model_copy(update={
        "build_digest": hashlib.sha256(f"{gpu}{flavour}".encode()).hexdigest()})})
    prefix = layout.plan_prefix("encoder", m.model.onnx_digest, gpu, f"{flavour}-{version}", m.build.build_digest)
    io = m.plan.io  # the plan info publish makes carries no I/O: the builder records it
    key = publish_plan(store, prefix, plan, lambda info: m.model_copy(update={"plan": info.model_copy(
        update={"io": io})})).manifest_key
    move_release(store, key, read_stored(store, key).manifest, release_on="built", reason="built")


@pytest.fixture
def farm(tmp_path):
    """A store with made-up TensorRT plans for h100, l4 and l40s and a TensorRT-RTX one for rtx-4090, released."""
    store = open_store((tmp_path / "store").as_uri())
    (tmp_path / "gpu_targets.yaml").write_text(FLEET)
    for gpu, flavour in (("h100", "tensorrt"), ("l4", "tensorrt"), ("l40s", "tensorrt"),
                         ("rtx-4090", "tensorrt_rtx")):
        release_made_up(store, tmp_path, gpu, flavour)
    return store, load_fleet(tmp_path / "gpu_targets.yaml"), tmp_path


def parse(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_tensorrt_plans_get_the_tensorrt_platform_and_warm_ups_every_instance_group_takes(farm):
    store, fleet, tmp = farm

    result = triton_repositories(store, fleet, TritonRequest("encoder", tmp / "repo", gpus=("h100", "l4")))

    [repo] = result.repositories
    cfg = parse(tmp / "repo/encoder/config.pbtxt")
    assert (repo.served_by, cfg.platform, cfg.backend) == ("tensorrt_plan", "tensorrt_plan", "")
    assert dict(cfg.cc_model_filenames) == {"8.9": "model.l4.plan", "9.0": "model.h100.plan"}
    assert [(g.name, list(g.profile)) for g in cfg.instance_group] == [("profile-0", ["0"]), ("profile-1", ["1"])]
    # the two profiles share no sequence length: each group's instances would refuse the other's warm-up
    assert not cfg.model_warmup and "no warm-up for profile 0, 1: another group refuses its shapes" in repo.notes
    assert sorted(p.name for p in (tmp / "repo/encoder/1").iterdir()) == ["model.h100.plan", "model.l4.plan"]

    shared = triton_repositories(store, fleet, TritonRequest("encoder", tmp / "shared", gpus=("h100", "l4"),
                                                             groups="shared"))

    cfg = parse(tmp / "shared/encoder/config.pbtxt")
    assert [(g.name, list(g.profile)) for g in cfg.instance_group] == [("all-profiles", ["0", "1"])]
    assert [w.name for w in cfg.model_warmup] == ["profile-0-opt", "profile-1-opt"]
    assert not any("warm-up" in n for n in shared.repositories[0].notes)


def test_gpus_whose_plans_need_two_backends_or_two_plans_for_one_capability_get_a_repository_each(farm):
    store, fleet, tmp = farm

    mixed = triton_repositories(store, fleet, TritonRequest("encoder", tmp / "mixed", gpus=("h100", "rtx-4090")))
    same_cc = triton_repositories(store, fleet, TritonRequest("encoder", tmp / "cc", gpus=("l4", "l40s")))

    assert [(r.path.name, r.served_by) for r in mixed.repositories] == [("h100", "tensorrt_plan"),
                                                                        ("rtx-4090", "python")]
    assert mixed.split == ["h100 (tensorrt_plan) and rtx-4090 (python) need two Triton backends: one repository "
                           "per GPU model"]
    assert parse(tmp / "mixed/rtx-4090/encoder/config.pbtxt").backend == "python"
    assert (tmp / "mixed/rtx-4090/encoder/1/model.py").is_file()
    assert not (tmp / "mixed/h100/encoder/1/model.py").exists()
    assert [r.path.name for r in same_cc.repositories] == ["l4", "l40s"]
    assert "l4 and l40s share compute capability 8.9 but not a plan" in same_cc.split[0]


def test_rtx_plans_refuse_one_group_per_profile_in_one_line(farm):
    store, fleet, tmp = farm
    with pytest.raises(UserInputError) as err:
        triton_repositories(store, fleet, TritonRequest("encoder", tmp / "r", gpus=("rtx-4090",),
                                                        groups="per-profile"))
    assert "\n" not in str(err.value) and "Python backend" in str(err.value) and "leave it out" in str(err.value)
    assert not (tmp / "r").exists()


def cli(args, cwd, columns=80):
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("gpus", [["h100", "l4"], ["h100", "rtx-4090"], ["rtx-4090"]])
def test_the_commands_own_lines_fit_80_columns_and_are_few(farm, gpus):
    _, _, tmp = farm
    done = cli(["triton", "encoder", "--repo", "repo", "--store", "store", "--targets-file", "gpu_targets.yaml",
                *(a for g in gpus for a in ("--gpu", g))], tmp)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines() + done.stderr.splitlines()
    said = [line for line in lines if not line.startswith(("#", " ", "{", "}", "]", "name:", "platform:", "backend:",
                                                           "max_batch", "input", "output", "cc_model", "instance",
                                                           "model_warmup"))]
    notes = [line for line in done.stdout.split("# Written by")[0].splitlines() if line.startswith("  ")]
    assert [line for line in lines if len(line) > 80] == []
    assert len(said) + len(notes) <= 12, said + notes


def opt_shapes(profiles: list[dict], index: int, batching: str) -> dict[str, list[int]]:
    """The shapes a profile's warm-up sends, worked out here (not by the code under test)."""
    top = min(r["max"][0] for p in profiles for r in p.values())
    return {n: [min(r["opt"][0], top), *r["opt"][1:]] if batching == "dynamic" else list(r["opt"])
            for n, r in profiles[index].items()}


def inside(shapes: dict[str, list[int]], profile: dict) -> bool:
    return all(lo <= d <= hi for n, s in shapes.items()
               for d, lo, hi in zip(s, profile[n]["min"], profile[n]["max"], strict=True))


@st.composite
def profile_sets(draw) -> list[dict]:
    """1-3 profiles of the encoder's two inputs (batch x sequence), sharing their ranges as a traffic file does."""
    profiles = []
    for _ in range(draw(st.integers(1, 3))):
        batch = sorted(draw(st.lists(st.integers(1, 64), min_size=3, max_size=3)))
        seq = sorted(draw(st.lists(st.integers(1, 512), min_size=3, max_size=3)))
        r = {"min": [batch[0], seq[0]], "opt": [batch[1], seq[1]], "max": [batch[2], seq[2]]}
        profiles.append({"input_ids": r, "attention_mask": dict(r)})
    return profiles


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flavour=st.sampled_from(sorted(TOOLCHAINS)), profiles=profile_sets(),
       groups=st.sampled_from([None, "per-profile", "shared"]), batching=st.sampled_from(["explicit", "dynamic"]),
       instances=st.sampled_from([None, 1, 3]))
def test_generated_plans_get_a_config_triton_parses_a_backend_that_runs_them_and_warm_ups_every_group_takes(
        flavour, profiles, groups, batching, instances):
    m = manifest(flavour, "l4", profiles)
    req = TritonRequest("encoder", Path("repo"), instances=instances, batching=batching, groups=groups)
    notes: list[str] = []
    try:
        spec = config_spec(req, [m], notes)
    except UserInputError as err:  # one group per profile names profiles: the tensorrt_plan platform's alone
        assert (flavour, groups) == ("tensorrt_rtx", "per-profile") and "\n" not in str(err)
        return
    text = config_text(spec)
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())  # Triton's schema

    every = list(range(len(profiles)))
    if flavour == "tensorrt":
        assert (cfg.platform, cfg.backend) == ("tensorrt_plan", "")
        assert dict(cfg.cc_model_filenames) == {"8.9": "model.l4.plan"}
        served = [[int(p) for p in g.profile] or [0] for g in cfg.instance_group]  # none named: the first only
        assert served == ([every] if groups == "shared" else [[i] for i in every])
    else:
        assert (cfg.platform, cfg.backend, dict(cfg.cc_model_filenames)) == ("", "python", {})
        assert not any(g.profile for g in cfg.instance_group)
        served = [every for _ in cfg.instance_group]
    assert sorted({p for s in served for p in s}) == every
    warmed = [i for i in every if all(any(inside(opt_shapes(profiles, i, batching), profiles[p]) for p in s)
                                      for s in served)]
    assert [w.name for w in cfg.model_warmup] == [f"profile-{i}-opt" for i in warmed]
    for w in cfg.model_warmup:
        shapes = {k: list(v.dims) if batching == "explicit" else [w.batch_size, *v.dims] for k, v in w.inputs.items()}
        assert all(any(inside(shapes, profiles[p]) for p in s) for s in served), (w.name, served)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert all(len(n) <= 78 for n in notes), notes


# --- the pinned image's own check, where Docker and the image are here


def _image() -> str:
    return os.environ.get("TRTFARM_TRITON_IMAGE", PINNED_IMAGE)


def _why_no_image() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client on this machine"
    done = subprocess.run(["docker", "image", "inspect", _image()], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no reason given"])[0]
        return f"`docker image inspect {_image()}` failed ({said}); the schema and rule checks above ran"
    return None


def _docker_gpus() -> list[str]:
    done = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True,
                          timeout=60)
    return ["--gpus", "all"] if "nvidia" in done.stdout else []


def tritonserver_log(repo: Path, model: str) -> str:
    """What the image's tritonserver logs loading ``model`` from ``repo`` (stopped once it loaded or failed)."""
    serve = (f"tritonserver --model-repository=/models --model-control-mode=explicit --load-model={model} "
             "--disable-auto-complete-config --exit-on-error=true > /tmp/log 2>&1 & pid=$!; "
             "for i in $(seq 240); do grep -q \"successfully loaded\\|failed to load\" /tmp/log && break; "
             "kill -0 $pid 2>/dev/null || break; sleep 1; done; kill $pid 2>/dev/null; cat /tmp/log")
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", *_docker_gpus(), "-v",
                           f"{repo}:/models:ro", "--entrypoint", "sh", _image(), "-c", serve],
                          capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr


CONFIG_ERRORS = ("Poll failed", "failed to poll", "Error parsing text-format", "specifies profile field",
                 "failed to run warmup sample", "unexpected 'platform' and 'backend' pair", "unexpected platform type")


@pytest.mark.integration
def test_the_pinned_image_parses_and_loads_the_written_repositories(tmp_path, farm):
    why = _why_no_image()
    if why:
        pytest.skip(why)
    store, fleet_, tmp = farm
    rtx_store, rtx_fleet = open_store((tmp_path / "rtx-store").as_uri()), fleet(tmp_path, ONE_CLASS)
    publish(rtx_store, rtx_fleet, tmp_path / "export")  # real TensorRT-RTX plans
    triton_repositories(rtx_store, load_fleet(rtx_fleet), TritonRequest("encoder", tmp_path / "rtx"))
    triton_repositories(store, fleet_, TritonRequest("encoder", tmp / "trt", gpus=("h100", "l4"), groups="shared"))
    gpus = bool(_docker_gpus())

    for repo in (tmp_path / "rtx", tmp / "trt"):
        log = tritonserver_log(repo, "encoder")
        assert not [e for e in CONFIG_ERRORS if e in log], log
        if not gpus:  # parsed, normalised and validated up to the instance groups, which need a GPU
            assert "has kind KIND_GPU but no GPUs are available" in log, log
        elif repo.name == "rtx":  # loaded, or refused by model.py saying what the image lacks or which GPU it is
            assert any(s in log for s in ("successfully loaded", REQUIREMENTS, "refusing to load it")), log
        else:  # made-up TensorRT plans: the TensorRT backend refuses their bytes, after the config was taken
            assert "failed to load" in log, log
