"""Triton versions from release histories, in process: what the mutation bench runs for ``serving/versions.py``.

Histories are written as a pointer keeps them (``ReleaseEvent``s, oldest first); tests/test_refresh.py and
tests/test_triton.py check the same numbering through ``trtfarm triton`` on real builds.
"""

from __future__ import annotations

from pathlib import Path

from trtfarm.serving.versions import capability_collisions, model_versions
from trtfarm.vocabulary.manifest import manifest_from_json
from trtfarm.vocabulary.pointer import ReleaseEvent, ReleasePointer

TEMPLATE = Path(__file__).parent / "data" / "manifest_encoder_rtx4090.json"


def at(second: int) -> str:
    return f"2026-03-01T10:{second // 60:02d}:{second % 60:02d}+00:00"


def event(export: str, second: int, action: str = "release", gpu: str = "a", by: str = "ci") -> ReleaseEvent:
    return ReleaseEvent(action=action, manifest=f"plans/m/{export}/{gpu}/{action}{second}/manifest.json",
                        onnx_digest=export, exported_at=None, at=at(second), by=by, reason=f"{action} {second}")


def pointer(gpu: str, *events: ReleaseEvent) -> ReleasePointer:
    last = events[-1]
    return ReleasePointer(model="m", gpu=gpu, toolchain="tensorrt-11.4.0.106", manifest=last.manifest,
                          plan_key="p", plan_sha256="0" * 64, onnx_digest=last.onnx_digest, build_digest="b",
                          exported_at=None, history=list(events), version=len(events))


def numbered(*pointers: ReleasePointer) -> list[tuple[int, str, str, dict[str, str]]]:
    return [(v.number, v.action, v.at, v.manifests) for v in model_versions(pointers)]


def test_one_export_released_on_every_gpu_is_one_version_and_each_next_export_the_next():
    a = pointer("a", event("e1", 0, gpu="a"), event("e2", 100, gpu="a"))
    b = pointer("b", event("e1", 0, gpu="b"), event("e2", 105, gpu="b"))
    assert numbered(a, b) == [
        (1, "release", at(0), {"a": a.history[0].manifest, "b": b.history[0].manifest}),
        (2, "release", at(105), {"a": a.history[1].manifest, "b": b.history[1].manifest})]


def test_a_version_needs_every_gpu_of_the_repository():
    a = pointer("a", event("e1", 0, gpu="a"), event("e2", 50, gpu="a"))
    b = pointer("b", event("e2", 60, gpu="b"))  # b was first released with e2: e1 never served on every GPU
    assert [(n, m) for n, _, _, m in numbered(a, b)] == [(1, {"a": a.history[1].manifest, "b": b.history[0].manifest})]


def test_moves_are_merged_in_time_order_across_histories_of_different_lengths():
    a = pointer("a", event("e1", 0, gpu="a"), event("e2", 100, gpu="a"), event("e3", 200, gpu="a"))
    b = pointer("b", event("e3", 210, gpu="b"))  # b's first move is later than a's second
    assert [m for _, _, _, m in numbered(a, b)] == [{"a": a.history[2].manifest, "b": b.history[0].manifest}]


def test_refreshes_start_close_and_change_no_version():
    release = event("e1", 0)
    refreshed = pointer("a", release, *(event("e1", s, "refresh", by="nightly") for s in range(10, 40, 10)))
    [v] = model_versions([refreshed])
    assert (v.number, v.action, v.at, v.by, v.reason, v.manifests) == (1, "release", at(0), "ci", "release 0",
                                                                      {"a": release.manifest})
    newer = pointer("a", release, event("e1", 10, "refresh"), event("e2", 20), event("e2", 30, "refresh"))
    assert [(n, m["a"]) for n, _, _, m in numbered(newer)] == [(1, release.manifest), (2, newer.history[2].manifest)]


def test_a_history_trimmed_to_refreshes_counts_its_first_refresh_as_its_release():
    trimmed = pointer("a", event("e1", 5, "refresh"), event("e1", 9, "refresh"))
    assert numbered(trimmed) == [(1, "refresh", at(5), {"a": trimmed.history[0].manifest})]


def test_a_rollback_is_a_new_higher_version_and_a_same_export_rebuild_of_one_gpu_is_a_release():
    a = pointer("a", event("e1", 0), event("e2", 10), event("e1", 20, "rollback"), event("e1", 30, "rollback"))
    assert [(n, action) for n, action, _, _ in numbered(a)] == [(1, "release"), (2, "release"), (3, "rollback"),
                                                              (4, "rollback")]
    rebuilt = pointer("a", event("e1", 0), event("e1", 10))  # the same export built again (a fleet change)
    assert [m["a"] for _, _, _, m in numbered(rebuilt)] == [h.manifest for h in rebuilt.history]


def test_moves_within_one_second_pair_up_by_their_place_in_each_history():
    a = pointer("a", event("e1", 7, gpu="a"), event("e2", 7, gpu="a"))
    b = pointer("b", event("e1", 7, gpu="b"), event("e2", 7, gpu="b"))
    assert [m for _, _, _, m in numbered(a, b)] == [
        {"a": a.history[0].manifest, "b": b.history[0].manifest},
        {"a": a.history[1].manifest, "b": b.history[1].manifest}]


def test_gpus_of_one_capability_that_need_different_plans_are_split_once():
    t = manifest_from_json(TEMPLATE.read_bytes())

    def manifest(cc: str, sha: str):
        return t.model_copy(update={"target": t.target.model_copy(update={"compute_capability": cc}),
                                    "plan": t.plan.model_copy(update={"sha256": sha})})

    manifests = {"ka": manifest("8.9", "1" * 64), "kb": manifest("8.9", "2" * 64), "kc": manifest("9.0", "1" * 64),
                 "kd": manifest("8.9", "1" * 64)}
    from trtfarm.serving.versions import Version
    shared = Version(1, {"a": "ka", "d": "kd", "c": "kc"}, "release", at(0), "ci", "r")
    assert capability_collisions([shared], manifests) == []
    split = [Version(2, {"a": "ka", "b": "kb", "c": "kc"}, "release", at(1), "ci", "r"),
             Version(3, {"b": "ka", "a": "kb"}, "release", at(2), "ci", "r")]
    [found] = capability_collisions(split, manifests)
    assert (found.compute_capability, found.gpus, found.version) == ("8.9", ("a", "b"), 2)
    assert "a and b share compute capability 8.9 but not a plan (version 2)" in found.reason()
