"""Refit: which released plans take new weights, the GPU-only seam, and the flow's fallback to a full build."""

from __future__ import annotations

import shutil

import onnx
import pytest

from trtfarm.building.build import build_group
from trtfarm.building.refit import refit_and_publish, refit_decision
from trtfarm.modelfile import model_source
from trtfarm.pipeline import run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.profiles.profile import profile_from_args, profiles_json
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import read_pointer
from trtfarm.store import open_store
from trtfarm.toolchain import import_flavour
from trtfarm.toolchain.refitter import RefitUnavailable, refit_plan
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.targets import plan_targets

from .conftest import ENCODER_PROFILE, REPO, make_model
from .fleets import REFIT_FLEET

pytestmark = pytest.mark.integration

PROFILES = [profile_from_args(ENCODER_PROFILE)]


def _export(folder, model: onnx.ModelProto):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model.SerializeToString(deterministic=True))
    shutil.copy(REPO / "examples/encoder/farm.yaml", folder / "farm.yaml")
    return folder / "model.onnx"


def _changed_graph(seed: int) -> onnx.ModelProto:
    """The encoder with one more node (an Identity on its output): same weights, another graph."""
    model = make_model.encoder_model(seed)
    out = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [f"{o}_pre" if o == out else o for o in node.output]
    model.graph.node.append(onnx.helper.make_node("Identity", [f"{out}_pre"], [out], name="extra_identity"))
    return model


@pytest.fixture
def released(tmp_path):
    """The first export built and released for both targets: one refittable (REFIT_INDIVIDUAL), one not."""
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(REFIT_FLEET)
    store = open_store((tmp_path / "store").as_uri())
    model = model_source(_export(tmp_path / "v1", make_model.encoder_model(0)), "encoder")
    targets = select_targets(load_fleet(fleet))
    for plan in plan_targets(model, model.onnx_digest, targets, PROFILES, None):
        build_group(store, model, [plan], PROFILES)
    return fleet, store, targets


def _decisions(tmp_path, store, targets, name, onnx_model):
    model = model_source(_export(tmp_path / name, onnx_model), "encoder")
    plans = plan_targets(model, model.onnx_digest, targets, PROFILES, None)
    return model, plans, {p.target.id: refit_decision(store, model, p, profiles_json(PROFILES)) for p in plans}


def test_refit_flags_are_in_the_manifest_and_only_same_graph_refittable_plans_are_refitted(released, tmp_path):
    fleet, store, targets = released
    pointer, _ = read_pointer(store, "releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json")
    m = read_manifest(store, pointer.manifest)
    assert m.target.refittable and "REFIT_INDIVIDUAL" in m.target.builder_flags

    _, _, new_weights = _decisions(tmp_path, store, targets, "v2", make_model.encoder_model(7))
    assert new_weights["rtx-4090-rtx1.7"].action == "refit"
    assert new_weights["rtx-4090-rtx1.7"].parent_manifest == pointer.manifest
    assert new_weights["rtx3090-rtx1.7"].action == "build"
    assert "built without a refit flag" in new_weights["rtx3090-rtx1.7"].reason

    _, _, new_graph = _decisions(tmp_path, store, targets, "v3", _changed_graph(7))
    assert {d.action for d in new_graph.values()} == {"build"}
    assert "graph changed since the released plan" in new_graph["rtx-4090-rtx1.7"].reason


def test_the_refit_seam_refuses_on_a_machine_where_the_engine_cannot_load(released):
    _, store, _ = released
    pointer, _ = read_pointer(store, "releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json")
    m = read_manifest(store, pointer.manifest)
    plan = store.get(m.plan.key).data
    with pytest.raises(RefitUnavailable, match="cannot be refitted here"):
        refit_plan(import_flavour("tensorrt_rtx"), plan, REPO / "examples/encoder/model.onnx")


def test_a_refitted_plan_is_published_with_its_parent_and_the_parents_tactics(released, tmp_path):
    _, store, targets = released
    model, plans, decisions = _decisions(tmp_path, store, targets, "v2", make_model.encoder_model(7))
    plan = next(p for p in plans if p.target.id == "rtx-4090-rtx1.7")
    parent_key = decisions[plan.target.id].parent_manifest
    parent = read_manifest(store, parent_key)

    def gpu_refit_stand_in(trt, data, onnx_path):  # the GPU refit cannot run here: keep the bytes, record the call
        calls.append(onnx_path)
        return data

    calls = []
    out = refit_and_publish(store, model, plan, parent_key, PROFILES, refit=gpu_refit_stand_in)
    assert calls == [model.plan_input] and out.status == "built" and "refitted from" in out.reason
    m = read_manifest(store, plan.manifest_key)
    assert m.lineage.parent_manifest == parent_key and m.model.onnx_digest == model.onnx_digest
    assert m.plan.tactics_digest == parent.plan.tactics_digest and m.target.refittable
    assert m.build.timing_cache.reason.startswith("refit:")
    assert out.release.action == "moved"  # the new weights are what serving hosts pull now


def test_the_refit_flow_falls_back_to_a_full_build_where_workers_cannot_refit_and_says_why(
        released, tmp_path):
    fleet, store, _ = released
    model = _export(tmp_path / "v2", make_model.encoder_model(7))
    rows = run_local(MatrixRequest(model=str(model), store=store.uri, targets_file=str(fleet), refit=True))
    by = {r.outcome.target: r.to_json() for r in rows}
    assert {t: r["status"] for t, r in by.items()} == {"rtx-4090-rtx1.7": "built", "rtx3090-rtx1.7": "built"}
    assert "full build: refit not possible on this machine" in by["rtx-4090-rtx1.7"]["reason"]
    assert "cannot be refitted here" in by["rtx-4090-rtx1.7"]["reason"]
    assert "full build: the released plan was built without a refit flag" in by["rtx3090-rtx1.7"]["reason"]
