"""The timing-cache merge loop: concurrent builders never lose an entry (file:// and moto's S3 server)."""

from __future__ import annotations

import json
import threading

from trtfarm.building.timing_cache import merge_timing_cache, pull_timing_cache
from trtfarm.layout import timing_cache_key as cache_key
from trtfarm.store import open_store


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
