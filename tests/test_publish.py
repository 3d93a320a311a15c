"""The publish protocol: plan first, manifest create-only, idempotent under concurrency."""

from __future__ import annotations

import threading

from trtfarm.publishing.publish import publish_plan, read_manifest
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import PlanInfo

from .test_manifest import sample


def manifest_for(info: PlanInfo):
    m = sample()
    m.plan = info
    return m


def test_two_concurrent_publishes_leave_one_manifest_and_both_succeed(store_uri, tmp_path):
    store = open_store(store_uri)
    plans = []
    for i in range(2):  # two workers' builds of the same build digest: different bytes, as real builds can be
        p = tmp_path / f"plan{i}"
        p.write_bytes(b"ftrt" + bytes([i]) * 5000)
        plans.append(p)
    barrier, results, errors = threading.Barrier(2), [], []

    def worker(path):
        barrier.wait()
        try:
            results.append(publish_plan(store, "plans/enc/x", path, manifest_for))
        except Exception as err:  # pragma: no cover - the assertion below reports it
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.created for r in results) == [False, True]
    keys = list(store.list("plans/enc/x/"))
    assert keys == ["plans/enc/x/manifest.json", "plans/enc/x/model.plan"]
    stored = read_manifest(store, "plans/enc/x/manifest.json")
    dest = tmp_path / "check.plan"
    store.download_file(stored.plan.key, dest, sha256=stored.plan.sha256)  # manifest matches the stored plan


def test_a_plan_left_without_manifest_is_adopted(store_uri, tmp_path):
    store = open_store(store_uri)
    orphan = b"ftrt" + b"\x01" * 100
    store.put_if_absent("plans/enc/y/model.plan", orphan)  # a worker died between plan and manifest
    ours = tmp_path / "plan"
    ours.write_bytes(b"ftrt" + b"\x02" * 100)
    pub = publish_plan(store, "plans/enc/y", ours, manifest_for)
    assert pub.created
    import hashlib

    assert pub.manifest.plan.sha256 == hashlib.sha256(orphan).hexdigest()
    assert pub.manifest.plan.bytes == len(orphan)


def test_a_plan_that_fails_verification_is_published_as_failed_and_not_released(example_onnx, fleet_file, tmp_path,
                                                                                monkeypatch):
    from trtfarm.building import build as build_mod
    from trtfarm.store import open_store
    from trtfarm.vocabulary.manifest import Check

    from .conftest_builds import publish_export

    def failing_engine(store, model, plan, profiles, result):  # what a GPU worker reports for a bad plan
        return build_mod.EngineResult(Check(status="failed", detail="profile 0 opt: cosine mean 0.91 below 0.9999"))

    monkeypatch.setattr(build_mod, "engine_result", failing_engine)
    store = open_store((tmp_path / "store").as_uri())
    _, outcomes = publish_export(store, fleet_file, tmp_path / "e", 0, 1_700_000_000, ["rtx-4090-rtx1.7"])
    out = outcomes["rtx-4090-rtx1.7"]
    assert out.status == "failed" and "cosine mean 0.91" in out.reason and out.manifest
    assert out.release.action == "refused" and not list(store.list("releases/"))
    assert "not released: verification failed (engine)" in str(out.release)
