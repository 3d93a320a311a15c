"""A store built by the suite for the fleet views, and the real planner as their referee.

Two registered models on a four-target fleet, built for real (TensorRT-RTX on this CPU) by ``run_local``: the example
encoder (three RTX targets built: two released on build, one waiting for its engine check on its GPU; the TensorRT
H100 target skipped here) and ``dedupe``, a model whose Unique operator the builder rejects (its targets fail), built
only for two targets (farm.yaml). ``planner_prefixes`` asks the farm's own planner (``plan_run``) which plan folder
each (model, target) gets under a fleet and whether it is published: what a run would really do.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from trtfarm import layout
from trtfarm.pipeline import plan_run, run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import register_export
from trtfarm.run_setup import find_exports
from trtfarm.store import open_store

from .conftest import REPO, make_model

FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
  trt-11.4:
    flavour: tensorrt
    version: "11.4.0.106"
    serving_images: [{image: "nvcr.io/nvidia/tritonserver:26.10-py3", tensorrt_version: "11.4.0.106"}]
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
  rtx-3090: {nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}
  h100: {nvml_name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0", memory_gib: 80, pool: gpu-h100}
targets:
  - {id: rtx4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx3090-rtx1.7-o5, gpu: rtx-3090, toolchain: rtx-1.7, settings: {optimization_level: 5}}
  - {id: h100-trt11.4, gpu: h100, toolchain: trt-11.4}
"""
DEDUPE_TARGETS = ["rtx4090-rtx1.7", "h100-trt11.4"]


def encoder_export(folder: Path, seed: int, name: str = "encoder") -> Path:
    """The example encoder with weights ``seed`` and its farm.yaml (naming the model ``name``)."""
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(make_model.encoder_model(seed).SerializeToString(deterministic=True))
    spec = (REPO / "examples/encoder/farm.yaml").read_text()
    (folder / "farm.yaml").write_text(spec.replace("name: encoder", f"name: {name}"))
    return folder


def dedupe_export(folder: Path) -> Path:
    """A model the builder rejects (Unique is not a TensorRT layer), for two targets."""
    folder.mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Unique", ["x"], ["y"], name="dedupe")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(folder / "model.onnx"))
    (folder / "farm.yaml").write_text(f"name: dedupe\nprecision: fp32\ntargets: {DEDUPE_TARGETS}\n")
    return folder


def build_all(store_uri: str, fleet: Path) -> list:
    """``trtfarm build`` of every registered model's latest export, in this process; its outcomes stored."""
    return run_local(MatrixRequest(store=store_uri, targets_file=str(fleet), dispatch="local"), report="outcomes")


def built_store(work: Path, store_uri: str) -> Path:
    """Register both models and build them; returns the fleet file."""
    fleet = work / "gpu_targets.yaml"
    fleet.write_text(FLEET)
    store = open_store(store_uri)
    register_export(store, encoder_export(work / "encoder-0", 0))
    register_export(store, dedupe_export(work / "dedupe"))
    rows = build_all(store_uri, fleet)
    statuses = {(r.model, r.outcome.target): r.outcome.status for r in rows}
    assert statuses == {("dedupe", "rtx4090-rtx1.7"): "failed", ("dedupe", "h100-trt11.4"): "skipped",
                        ("encoder", "rtx4090-rtx1.7"): "built", ("encoder", "rtx5090-rtx1.7"): "built",
                        ("encoder", "rtx3090-rtx1.7-o5"): "built", ("encoder", "h100-trt11.4"): "skipped"}, statuses
    return fleet


def planner_prefixes(store_uri: str, fleet: Path) -> dict[tuple[str, str], tuple[str, bool]]:
    """``(model, target) -> (plan folder, published)`` as the farm's planner decides them under ``fleet``."""
    store = open_store(store_uri)
    request = MatrixRequest(store=store_uri, targets_file=str(fleet), dispatch="farm")
    out = {}
    for plan in plan_run(request, store, find_exports(store, None), farm=True):
        for target, outcome in plan.outcomes.items():
            assert outcome.status == "up-to-date" and outcome.manifest_key, (plan.name, target, outcome)
            out[plan.name, target] = (layout.folder_of(outcome.manifest_key), True)
        for job in plan.jobs:
            for p in job.plans:
                out[plan.name, p.target.id] = (p.prefix, False)
    return out
