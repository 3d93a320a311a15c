"""Retention keeps the newest N per (model, GPU, toolchain) and whatever a pointer references."""

from __future__ import annotations

from trtfarm.publishing.gc import delete_plans, plans_to_delete
from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release import move_release
from trtfarm.store import open_store

from .conftest_builds import publish_export


def test_gc_keeps_newest_and_released_and_is_a_dry_run_until_applied(fleet_file, tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    keys = []
    for i in range(4):
        _, out = publish_export(store, fleet_file, tmp_path / f"e{i}", i, 1_700_000_000 + i, ["rtx-4090-rtx1.7"])
        keys.append(out["rtx-4090-rtx1.7"].manifest.removeprefix(store.uri + "/"))
    move_release(store, keys[0], read_manifest(store, keys[0]), release_on="built", reason="pin the oldest",
                 rollback=True)
    doomed = plans_to_delete(store, keep=2)
    assert [d.manifest_key for d in doomed] == [keys[1]]  # keys[0] is released, keys[2:] are the newest two
    assert read_manifest(store, keys[1]) is not None  # dry run deleted nothing
    freed = delete_plans(store, doomed)
    assert freed > 0 and read_manifest(store, keys[1]) is None
    assert not list(store.list(keys[1].rsplit("/", 1)[0]))
    assert all(read_manifest(store, k) for k in (keys[0], keys[2], keys[3]))
