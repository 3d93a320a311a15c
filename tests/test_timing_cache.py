"""Shared timing caches: the merge loop never loses an entry (file:// and moto's S3 server), and the key is what
invalidates a cache (the exact TensorRT build, the GPU, the cache-relevant builder flags).

``ITimingCache.combine`` is TensorRT's (it cannot run here): ``union`` stands in for it in the merge loop; the real
bindings' classes specify the stand-in on which ``build_group`` publishes first and merges after
(tests/toolchain/drive_tensorrt.py, scenario ``timing_cache_after_publish``).
"""

from __future__ import annotations

import json
import threading

import pytest

from trtfarm.building.build import _timing
from trtfarm.building.timing_cache import cache_flags, cache_flags_digest, merge_timing_cache, pull_timing_cache
from trtfarm.layout_shared import timing_cache_key
from trtfarm.store import open_store
from trtfarm.vocabulary.fleet import BuilderSettings, HardwareCompatibility, RefitMode

DEFAULTS = cache_flags_digest(BuilderSettings())


def cache_key(toolchain: str, gpu: str) -> str:
    flavour, version = toolchain.rsplit("-", 1)
    return timing_cache_key(flavour, version, gpu, "9.0", DEFAULTS)


def union(current: bytes, ours: bytes) -> bytes:
    """Stands in for ITimingCache.combine (TensorRT only): appends entries, keeps existing ones."""
    merged = json.loads(current)
    for k, v in json.loads(ours).items():
        merged.setdefault(k, v)
    return json.dumps(merged, sort_keys=True).encode()


def test_sixteen_concurrent_writers_lose_no_entry(store_uri):
    store = open_store(store_uri)
    key = cache_key("tensorrt-11.4.0.106", "h100")
    barrier = threading.Barrier(16)
    attempts = []

    def writer(i):
        barrier.wait()
        ours = json.dumps({f"layer-{i}-{j}": i for j in range(3)}).encode()
        attempts.append(merge_timing_cache(store, key, ours, union, sleep=lambda s: None).attempts)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = json.loads(pull_timing_cache(store, key))
    assert len(entries) == 48 and all(entries[f"layer-{i}-{j}"] == i for i in range(16) for j in range(3))
    assert len(attempts) == 16 and max(attempts) > 1  # there was contention, and it was resolved


def test_missing_cache_pulls_as_none_and_first_merge_creates_it(store_uri):
    store = open_store(store_uri)
    key = cache_key("tensorrt-10.16.1.11", "l4")
    assert pull_timing_cache(store, key) is None
    merge_timing_cache(store, key, b'{"a": 1}', union)
    assert json.loads(pull_timing_cache(store, key)) == {"a": 1}


@pytest.mark.parametrize("change", [{"tf32": False}, {"refit": RefitMode.refit_identical}, {"refit": RefitMode.refit},
                                    {"hardware_compatibility": HardwareCompatibility.ampere_plus},
                                    {"hardware_compatibility": HardwareCompatibility.same_compute_capability}])
def test_each_flag_a_cache_depends_on_gets_its_own_cache(change):
    changed = BuilderSettings(**change)
    assert cache_flags(changed) != cache_flags(BuilderSettings()) and cache_flags_digest(changed) != DEFAULTS
    assert timing_cache_key("tensorrt", "11.4.0.106", "h100", "9.0", cache_flags_digest(changed)) != \
        cache_key("tensorrt-11.4.0.106", "h100")


def test_settings_a_cache_does_not_depend_on_share_it():
    for same in ({"workspace_mib": 1024}, {"optimization_level": 5}, {"detailed_profiling": False}):
        assert cache_flags_digest(BuilderSettings(**same)) == DEFAULTS


def test_another_exact_build_or_gpu_gets_its_own_cache():
    keys = {timing_cache_key("tensorrt", v, g, cc, DEFAULTS) for v, g, cc in (
        ("11.4.0.106", "h100", "9.0"), ("11.4.0.107", "h100", "9.0"), ("10.16.1.11", "h100", "9.0"),
        ("11.4.0.106", "h200", "9.0"), ("11.4.0.106", "l4", "8.9"))}
    assert len(keys) == 5


def test_tensorrt_rtx_builds_pull_no_shared_cache(tmp_path):
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.vocabulary.fleet import resolve_target
    from trtfarm.vocabulary.targets import TargetWork

    from .conftest import RTX_FLEET

    (tmp_path / "fleet.yaml").write_text(RTX_FLEET)
    fleet = load_fleet(tmp_path / "fleet.yaml")
    store = open_store(str(tmp_path / "store"))
    rtx = [resolve_target(fleet, t) for t in fleet.targets]
    rtx = [t for t in rtx if t.toolchain.flavour.value == "tensorrt_rtx"]
    assert rtx and all(t.settings.timing_cache for t in rtx)  # the fleet asks for one: RTX has none to give
    for t in rtx:
        plan = TargetWork(t, "0" * 64, "plans/x", None, "releases/x/y/z.json")
        assert _timing(store, plan, None) == (None, None)  # no key, no pull
