"""The state records of many models in one object (``state-index/<nn>.json``): 32 GETs for a cold view on S3.

A cold view read one object per model. Each shard holds, for the models whose name hashes to it, the exact bytes of
the model's state record as its writer put them (``state/record.py`` ``write_state``). A reader takes an entry only
where it proves itself: the listing of ``state/`` shows the record's version, and on S3 a single-part object's
version (its ETag) is the MD5 of its bytes, so an entry whose MD5 is the listed ETag *is* the record, whoever wrote
the index and whenever. Any other entry (a record rewritten since, by trtfarm or not; a copy or an encryption whose
ETags are not MD5s; a damaged shard) is passed over and the record itself read. The index only saves reads: it never
changes an answer.

Kept by the one writer of state records (``state/recorder.py``) after its records are written, each shard touched
once, by compare-and-swap with a few retries; a shard another writer keeps replacing is left to it (its entries are
then older than the records, and the records are read). Written only on a store whose versions are MD5s (S3); on
the file store a record is a local read, and a version (size and mtime) proves nothing of the bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from trtfarm.errors import StoreError
from trtfarm.layout_shared import state_index_key, state_index_prefix
from trtfarm.state.record import single_part_md5
from trtfarm.store import Conflict, Store
from trtfarm.store.base import ListedObject

SHARDS = 32  # 1,000 models: 32 objects of about 31 records (875 KB) each, against 1,000 GETs
INDEX_FORMAT = 1
ATTEMPTS = 4  # compare-and-swap tries of one shard before it is left to the other writer
READ_THREADS = 16


def shard_of(model: str) -> int:
    """The shard a model's record is indexed in: the same on every host and in every version of Python."""
    return int(hashlib.sha256(model.encode()).hexdigest()[:8], 16) % SHARDS


def proves(data: bytes, version: str) -> bool:
    """Whether ``data`` is the object a listing shows at ``version``: a single-part S3 ETag equal to its MD5."""
    md5 = single_part_md5(version)
    return md5 is not None and hashlib.md5(data, usedforsecurity=False).hexdigest() == md5


def index_records(store: Store, written: Mapping[str, bytes]) -> int:
    """Put each model's record bytes (``written``: model -> what ``write_state`` wrote) in its shard; shards kept.

    Nothing on a store whose versions are not MD5s. A shard that stays contended after ``ATTEMPTS`` tries, or that
    cannot be written, is left as it is: its entries for these models are then older than their records, which
    costs readers a GET each and nothing else.
    """
    if not store.md5_versions or not written:
        return 0
    by_shard: dict[int, dict[str, bytes]] = {}
    for model, data in written.items():
        by_shard.setdefault(shard_of(model), {})[model] = data
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(by_shard))) as pool:
        return sum(pool.map(lambda item: _merge(store, *item), by_shard.items()))


def _merge(store: Store, shard: int, entries: dict[str, bytes]) -> bool:
    key = state_index_key(shard)
    try:
        for _ in range(ATTEMPTS):
            blob = store.get(key)
            records = _records(blob.data) if blob else {}
            records.update((model, data.decode()) for model, data in entries.items())
            doc = {"format": INDEX_FORMAT, "records": dict(sorted(records.items()))}
            try:
                store.compare_and_swap(key, json.dumps(doc, separators=(",", ":")).encode(),
                                       blob.etag if blob else None)
                return True
            except Conflict:
                continue
    except StoreError:  # the index is an economy: a store that refuses it costs the readers GETs, not the run
        return False
    return False


def _records(data: bytes) -> dict[str, str]:
    """A shard's entries (model -> record text); none from a shard that is not one (it is then written anew)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    records = doc.get("records") if isinstance(doc, dict) and doc.get("format") == INDEX_FORMAT else None
    if not isinstance(records, dict):
        return {}
    return {m: t for m, t in records.items() if isinstance(m, str) and isinstance(t, str)}


def indexed_records(store: Store, listed: Mapping[str, ListedObject]) -> dict[str, bytes]:
    """The record bytes the index proves for these models (model -> bytes), by their records' listed versions.

    ``listed``: model -> its record as the listing shows it. Lists the index (one request: a store without one
    costs no more), then reads the shards these models hash to, side by side; a model whose entry is missing or not
    its listed record is left out (the caller reads its record).
    """
    wanted = [m for m in listed if single_part_md5(listed[m].version)]
    if not wanted:
        return {}
    try:
        present = set(store.list(state_index_prefix()))
    except StoreError:
        return {}
    shards = sorted({shard_of(m) for m in wanted} & {s for s in range(SHARDS) if state_index_key(s) in present})

    def read(shard: int) -> dict[str, str]:
        try:
            blob = store.get(state_index_key(shard))
        except StoreError:
            return {}
        return _records(blob.data) if blob else {}

    if not shards:
        return {}
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(shards))) as pool:
        entries = dict(zip(shards, pool.map(read, shards), strict=True))
    found = {}
    for model in wanted:
        text = entries.get(shard_of(model), {}).get(model)
        data = text.encode() if text is not None else None
        if data is not None and proves(data, listed[model].version):
            found[model] = data
    return found
