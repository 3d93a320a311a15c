"""Release pointers: policy, never backwards, rollback by hand, concurrent movers (file:// and moto's S3)."""

from __future__ import annotations

import threading

import pytest

from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import ReleaseRefused, pointer_key, read_pointer
from trtfarm.releases.moves import move_release
from trtfarm.store import open_store

from .conftest_builds import publish_export


def key_of(store, url):
    return url.removeprefix(store.uri + "/")


@pytest.fixture
def two_exports(store_uri, fleet_file, tmp_path):
    """The same target built from an older and a newer export (the test fleet keeps the default policy)."""
    store = open_store(store_uri)
    _, old = publish_export(store, fleet_file, tmp_path / "old", 1, 1_700_000_000, ["rtx-4090-rtx1.7"])
    _, new = publish_export(store, fleet_file, tmp_path / "new", 2, 1_800_000_000, ["rtx-4090-rtx1.7"])
    keys = [key_of(store, o["rtx-4090-rtx1.7"].manifest) for o in (old, new)]
    return store, keys, [read_manifest(store, k) for k in keys]


def test_default_policy_refuses_a_plan_whose_engine_check_is_pending(two_exports):
    store, (old, new), (m_old, m_new) = two_exports
    assert read_pointer(store, pointer_key(m_new)) == (None, None)  # the build did not release it
    with pytest.raises(ReleaseRefused, match="engine check is pending on NVIDIA GeForce RTX 4090"):
        move_release(store, new, m_new, reason="test")
    assert read_pointer(store, pointer_key(m_new)) == (None, None)


def test_a_failed_verification_is_never_released_even_on_built(two_exports):
    store, (_, new), (_, m_new) = two_exports
    m_new.verification.onnx.status = "failed"
    with pytest.raises(ReleaseRefused, match=r"verification failed \(onnx\)"):
        move_release(store, new, m_new, release_on="built", reason="test")


def test_the_pointer_never_moves_back_to_an_older_export_unless_rolled_back(two_exports):
    store, (old, new), (m_old, m_new) = two_exports
    move_release(store, new, m_new, release_on="built", reason="nightly", by="ci")
    with pytest.raises(ReleaseRefused, match="older.*--rollback"):
        move_release(store, old, m_old, release_on="built", reason="oops")
    assert read_pointer(store, pointer_key(m_new))[0].manifest == new
    pointer = move_release(store, old, m_old, release_on="built", reason="p99 regression in new", by="alice@ops",
                           rollback=True)
    assert pointer.manifest == old and pointer.plan_sha256 == m_old.plan.sha256
    assert [(e.action, e.by, e.reason) for e in pointer.history] == [
        ("release", "ci", "nightly"), ("rollback", "alice@ops", "p99 regression in new")]


def test_concurrent_movers_lose_no_history(two_exports):
    store, keys, manifests = two_exports
    m = manifests[1]
    barrier = threading.Barrier(8)

    def mover(i):
        barrier.wait()
        mm = m.model_copy(deep=True)
        move_release(store, f"{keys[1]}#{i}", mm, release_on="built", reason=f"mover {i}", by=f"w{i}")

    threads = [threading.Thread(target=mover, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pointer, _ = read_pointer(store, pointer_key(m))
    assert sorted(e.reason for e in pointer.history) == sorted(f"mover {i}" for i in range(8))


def test_pull_streams_the_released_plan_and_refuses_a_damaged_one(two_exports, tmp_path):
    from trtfarm.errors import IntegrityError
    from trtfarm.identity import sha256_file
    from trtfarm.runtime.pull import pull_release

    store, (_, new), (_, m_new) = two_exports
    move_release(store, new, m_new, release_on="built", reason="test")
    got = pull_release(store, "encoder", "rtx-4090", ["tensorrt-11.4.0.106", "tensorrt_rtx-1.7.1.116"],
                       tmp_path / "host" / "encoder.plan")
    assert sha256_file(got.plan) == m_new.plan.sha256 and got.manifest_path.is_file()
    store.delete(m_new.plan.key)
    store.put_if_absent(m_new.plan.key, b"vtrt" + b"\x00" * 100)  # someone overwrote the stored plan
    with pytest.raises(IntegrityError, match="does not match the manifest"):
        pull_release(store, "encoder", "rtx-4090", ["tensorrt_rtx-1.7.1.116"], tmp_path / "host2" / "encoder.plan")
    assert not (tmp_path / "host2" / "encoder.plan").exists()
