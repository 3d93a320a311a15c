"""A damaged own cache (each garbage shape, whole files and single entries) is read again, never a crash.

Each cached entry is checked when read (its shape, and each value against its field's type): garbage is a miss,
and the object is read again from the store.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from .fleet_store import built_store
from .test_cachedir import GARBAGE, _clean_env, _views

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """(work folder, store URI, fleet file, what-if fleet file) of a built store, never changed by the tests."""
    work = tmp_path_factory.mktemp("damaged-cache")
    store = (work / "store").as_uri()
    fleet = built_store(work, store)
    doc = yaml.safe_load(fleet.read_text())
    doc["toolchains"]["rtx-1.7"]["version"] = "1.7.2.1"
    (work / "whatif.yaml").write_text(yaml.safe_dump(doc))
    return work, store, fleet, work / "whatif.yaml"

def _damage(cache: Path, shape: bytes) -> int:
    """Every file of the own cache replaced by ``shape``, and each entry of each summary file by it; how many."""
    count = 0
    for path in [p for p in cache.rglob("*") if p.is_file()]:
        doc = None
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            pass
        if isinstance(doc, dict) and isinstance(doc.get("entries"), dict) and doc["entries"]:
            bad = json.loads(shape) if shape != b"{not json" else "{not json"
            entries = {k: (bad if i % 2 else [v[0], bad]) for i, (k, v) in enumerate(doc["entries"].items())}
            path.write_text(json.dumps({**doc, "entries": entries}))
        else:
            path.write_bytes(shape)
        count += 1
    return count


@pytest.mark.parametrize("shape", GARBAGE, ids=[g.decode()[:20] for g in GARBAGE])
def test_a_damaged_own_cache_is_read_again_never_a_crash(farm, tmp_path, shape):
    env = _clean_env(tmp_path / "own")
    clean = _views(farm, env, tmp_path)  # fills the cache
    cache = tmp_path / "own" / "cache" / "trtfarm"
    assert (cache / "survey").is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert _damage(cache, shape) > 0
    assert _views(farm, env, tmp_path) == clean
    assert _views(farm, env, tmp_path) == clean  # and again, from what the second run wrote
