"""The publish protocol's checks in process, on the fast farm (tests/chain_farm.py): a damaged manifest or plan
object named as such, a withdrawal that leaves nothing a reader could reach, and a store that fails half-way
leaving no attestation of a manifest that was never stored. tests/test_publish.py races real builds."""

from __future__ import annotations

import json

import pytest

from trtfarm import layout
from trtfarm.errors import CorruptObject, StoreError
from trtfarm.publishing.attest import Attestation, read_stored
from trtfarm.publishing.publish import plan_intact, plan_rehash, publish_plan, read_manifest, withdraw
from trtfarm.store.local import LocalStore

from .chain_farm import T0, T1, TC, Farm


@pytest.fixture
def farm(tmp_path):
    return Farm(tmp_path / "farm")


class ManifestWritesFail(LocalStore):
    """The farm's file store, failing as a full disk would at the one write that makes a plan visible.

    ``deletes_fail`` makes the clean-up fail too (a store that is down, not only full).
    """

    def __init__(self, root, deletes_fail: bool = False) -> None:
        super().__init__(root)
        self.deletes_fail = deletes_fail

    def put_if_absent(self, key: str, data: bytes) -> bool:  # noqa: D102
        if key.endswith(f"/{layout.MANIFEST_NAME}"):
            raise StoreError(f"{self.url(key)}: No space left on device")
        return super().put_if_absent(key, data)

    def delete(self, key: str) -> None:  # noqa: D102
        if self.deletes_fail:
            raise StoreError(f"{self.url(key)}: the store does not answer")
        super().delete(key)


def _names(store, prefix: str) -> set[str]:
    return {k.rsplit("/", 1)[1] for k in store.list(f"{prefix}/")}


def test_a_manifest_object_that_is_not_a_manifest_is_corrupt_and_names_its_key_and_fix(farm):
    key = farm.keys["enc", "rtx-4090", T1]
    assert read_manifest(farm.store, key) == read_stored(farm.store, key).manifest
    assert read_manifest(farm.store, key.replace("manifest.json", "nothing.json")) is None
    farm.store.delete(key)
    farm.store.put_if_absent(key, b"[1, 2]")
    with pytest.raises(CorruptObject) as err:
        read_manifest(farm.store, key)
    assert str(err.value).startswith(f"{farm.store.url(key)}: not a trtfarm manifest")
    assert str(err.value).endswith(" Rebuild the plan (`trtfarm build` replaces a damaged manifest of its own build) "
                                   "or delete the key.")


def test_a_plan_object_missing_or_of_another_size_is_not_intact(farm):
    m = read_stored(farm.store, farm.keys["enc", "rtx-4090", T1]).manifest
    assert plan_intact(farm.store, m) is None and plan_rehash(farm.store, m) is None
    data = farm.store.get(m.plan.key).data
    farm.store.delete(m.plan.key)
    assert plan_intact(farm.store, m) == f"its plan {m.plan.key} is missing"
    farm.store.put_if_absent(m.plan.key, data + bytes(1000))
    assert plan_intact(farm.store, m) == f"its plan {m.plan.key} has {len(data) + 1000:,} bytes, the manifest says " \
                                        f"{m.plan.bytes:,}"
    farm.store.delete(m.plan.key)
    farm.store.put_if_absent(m.plan.key, data[:-1] + b"\x00")  # the same size: only a re-hash tells
    assert plan_intact(farm.store, m) is None
    damaged = plan_rehash(farm.store, m)
    assert damaged is not None and m.plan.sha256[:12] in damaged


def test_withdraw_removes_the_manifest_every_attestation_and_the_plan_of_that_folder_only(farm):
    key = farm.keys["enc", "rtx-4090", T1]
    folder = layout.folder_of(key)
    farm.store.put_if_absent(f"{folder}/{layout.provenance_name('0' * 64)}", b"{}")  # a killed publish's pair
    other = layout.folder_of(farm.keys["enc", "rtx-4090", T0])
    before = _names(farm.store, other)
    withdraw(farm.store, folder)
    assert _names(farm.store, folder) == set() and read_stored(farm.store, key) is None
    assert _names(farm.store, other) == before and len(before) == 4


@pytest.mark.parametrize("deletes_fail", [False, True])
def test_a_store_that_fails_at_the_manifest_leaves_no_attestation_and_the_next_publish_adopts_the_plan(
        farm, tmp_path, deletes_fail):
    stored = read_stored(farm.store, farm.keys["mlp", "rtx-4090", T1])
    plan = tmp_path / "p.plan"
    plan.write_bytes(farm.store.get(stored.manifest.plan.key).data)
    prefix = layout.plan_prefix("mlp", "f" * 64, "rtx-4090", TC, "e" * 64)
    attest = Attestation(lambda m, sha: json.dumps({"subject": m.plan.sha256}).encode(), farm.signer)
    full = ManifestWritesFail(farm.store.root, deletes_fail=deletes_fail)
    with pytest.raises(StoreError, match="No space left on device"):  # the store's own error, not the clean-up's
        publish_plan(full, prefix, plan, lambda info: stored.manifest.model_copy(update={"plan": info}),
                     attest=attest)
    left = _names(farm.store, prefix)
    pair = {n for n in left if layout.is_attestation(n)}
    assert left - pair == {"model.plan"}  # the plan waits for the next publish; no manifest makes anything visible
    assert len(pair) == (2 if deletes_fail else 0), left  # a store that is down keeps a pair no reader can reach
    again = publish_plan(farm.store, prefix, plan, lambda info: stored.manifest.model_copy(update={"plan": info}),
                         attest=attest)
    assert again.created and again.manifest.plan.sha256 == stored.manifest.plan.sha256
    assert read_stored(farm.store, layout.manifest_key(prefix)).verdict(farm.trust).ok is True

