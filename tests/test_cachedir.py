"""Nothing is trusted from a path another local user can write, and a damaged own cache is read again.

A second local user (``nobody``) makes every cache path first, the old ones in the shared temp folder and the new
ones, with garbage of several shapes and with symbolic links to folders of this user; ``status``, ``plan --fleet``
and ``build`` then run as this user (root) with HOME, XDG_CACHE_HOME and TMPDIR in folders ``nobody`` can write. They
exit 0, print no traceback, give the answer a clean machine gives, and leave what ``nobody`` made as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from . import forkcli
from .conftest import REPO
from .fleet_store import built_store
from .fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
NOBODY = 65534
GARBAGE = [b"[1, 2, 3]", b"7", b'{"format": 2, "entries": {"x": [0, 1]}}', b'{"format": 2, "entries": [0]}',
           b'{"format": 2, "entries": {"x": 5}}', b'"text"', b"null", b"{not json"]
KINDS = ("manifest", "pointer", "outcome", "spec", "shared", "export", "record")  # any name a kind may have


def _sha16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """(work folder, store URI, fleet file, what-if fleet file) of a built store, never changed by the tests."""
    work = tmp_path_factory.mktemp("cachedir")
    store = (work / "store").as_uri()
    fleet = built_store(work, store)
    doc = yaml.safe_load(fleet.read_text())
    doc["toolchains"]["rtx-1.7"]["version"] = "1.7.2.1"
    (work / "whatif.yaml").write_text(yaml.safe_dump(doc))
    return work, store, fleet, work / "whatif.yaml"


@pytest.fixture(scope="module")
def first_run(farm, tmp_path_factory):
    """A clean machine's folders (home, cache, tmp) after the views ran there once, filling its own cache, and the
    views' answers: the store never changes, so this is every test's clean answer."""
    root = tmp_path_factory.mktemp("clean")
    return root, _views(farm, _clean_env(root), root)


@pytest.fixture
def clean(first_run):
    return first_run[1]


@pytest.fixture
def shared(tmp_path):
    """A folder like /tmp that ``nobody`` can add to (pytest's own base folder is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="trtfarm-shared-", dir="/tmp"))
    path.chmod(0o1777)  # as /tmp is: anyone may add to it
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cli(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "200", **env}
    for name in ("TRTFARM_CACHE_DIR", "PREFECT_API_URL", *(k for k, v in env.items() if v is None)):
        full.pop(name, None)
    return forkcli.trtfarm(args, cwd=cwd, env=full, timeout=600)


def _answer(done: subprocess.CompletedProcess):
    """The command's JSON answer without ages (they move with the clock); it must have ended well."""
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("age_s", "seconds", "duration_s")}
        return [strip(x) for x in v] if isinstance(v, list) else v
    return strip(json.loads(done.stdout))


def _views(farm, env: dict, cwd: Path) -> list:
    work, store, fleet, whatif = farm
    return [_answer(_cli("status", "--json", "--store", store, "--targets-file", str(fleet), env=env, cwd=cwd)),
            _answer(_cli("whatif", "--fleet", str(whatif), "--json", "--store", store, "--targets-file", str(fleet),
                         env=env, cwd=cwd))]


def _clean_env(root: Path) -> dict:
    for name in ("home", "cache", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return {"HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "cache"), "TMPDIR": str(root / "tmp")}


def _as_nobody(script: str, *args: str) -> None:
    """Run ``script`` (Python) as uid/gid 65534: what it makes belongs to that user."""
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
                    script, *args], check=True, timeout=60)


PLANT = r"""
import json, os, sys
from pathlib import Path
garbage, folders, links = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
for folder in folders:  # every file a cache of that kind could hold, each a garbage shape
    f = Path(folder)
    f.mkdir(parents=True, exist_ok=True)
    if f.stat().st_uid == os.getuid():
        os.chmod(f, 0o777)
    for i, name in enumerate(sys.argv[4:]):
        (f / name).write_bytes(garbage[i % len(garbage)].encode())
for link, target in links:
    Path(link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
"""


def _plant(folders: list[Path], links: list[tuple[Path, Path]]) -> None:
    names = [f"{k}.json" for k in KINDS] + ["export.json", "farm.yaml", "profiles.yaml", "model.onnx"]
    _as_nobody(PLANT, json.dumps([g.decode() for g in GARBAGE]), json.dumps([str(f) for f in folders]),
               json.dumps([[str(a), str(b)] for a, b in links]), *names)


def _snapshot(root: Path) -> dict:
    """Every path under ``root`` (links not followed): its owner, kind, and bytes or link target."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        what = os.readlink(path) if path.is_symlink() else (
            hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else "dir")
        out[str(path)] = (st.st_uid, stat.S_IFMT(st.st_mode), what)
    return out


def _hostile_world(shared: Path, farm, cache_home: Path) -> tuple[dict, list[Path]]:
    """Old and new cache paths made first by ``nobody``; returns the env and the folders that must stay as made."""
    work, store, fleet, _ = farm
    uris = [store, *(f"{store}/models/{m}/{e}" for m in ("encoder", "dedupe")
                     for e in os.listdir(work / "store" / "models" / m))]
    home, tmp = shared / "home", shared / "tmp"
    victim = shared / "victim"  # a folder of root's that a followed link would write into
    victim.mkdir(mode=0o700)
    folders = []
    for base in (tmp / "trtfarm", cache_home / "trtfarm", home / ".cache" / "trtfarm"):
        folders += [base / "survey" / _sha16(u) for u in uris]
        folders += [base / kind / _sha16(u) for kind in ("specs", "exports") for u in uris]
        folders += [base / "converted" / m / "x" / mode for m in ("encoder", "dedupe") for mode in ("fp16", "int8")]
    links = [(tmp / "trtfarm" / "survey-link", victim), (shared / "linked" / "trtfarm", victim)]
    _plant([home, tmp, cache_home, *folders], links)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(cache_home), "TMPDIR": str(tmp)}, [victim]


WHERE = ["nobody's cache home", "nobody's home, no XDG_CACHE_HOME", "nobody's folder in a sticky cache home",
         "nobody's link to root's folder in a sticky cache home"]


@pytest.mark.parametrize("where", WHERE)
def test_caches_another_user_made_first_are_neither_trusted_nor_a_crash(farm, clean, shared, tmp_path, where):
    if "sticky" in where:
        cache_home = shared / "sticky"  # like /tmp: root's, everyone may add to it
        cache_home.mkdir()
        cache_home.chmod(0o1777)
    else:
        cache_home = shared / "xdg"  # nobody's own folder: everything below it is theirs to swap
    env, kept = _hostile_world(shared, farm, cache_home)
    if "no XDG_CACHE_HOME" in where:  # ~/.cache/trtfarm, in nobody's home
        env["XDG_CACHE_HOME"] = None
    if "link" in where:  # the cache folder itself: nobody's link to a folder root owns
        _as_nobody("import os, sys; os.rename(sys.argv[1], sys.argv[2]); os.symlink(sys.argv[3], sys.argv[1])",
                   str(cache_home / "trtfarm"), str(shared / "moved"), str(shared / "victim"))
    before = _snapshot(shared)
    hostile = _views(farm, env, tmp_path)
    assert hostile == clean
    assert _snapshot(shared) == before  # nothing planted was followed, written or removed, and nothing added
    assert [list(v.iterdir()) for v in kept] == [[]]


def test_a_build_beside_caches_another_user_made_first_builds_as_on_a_clean_machine(farm, shared, tmp_path,
                                                                                  example_dir):
    env, _ = _hostile_world(shared, farm, shared / "xdg")
    before = _snapshot(shared)
    rows = {}
    for name, run_env in (("clean", _clean_env(tmp_path / "clean")), ("hostile", env)):
        cwd = tmp_path / name
        cwd.mkdir(exist_ok=True)
        (cwd / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
        done = _cli("build", str(example_dir / "model.onnx"), "--json", env=run_env, cwd=cwd)
        rows[name] = [(r["target"], r["status"]) for r in _answer(done)]
    assert rows["hostile"] == rows["clean"] == [("rtx-4090-rtx1.7", "built")]
    assert _snapshot(shared) == before


FARM_BUILD = """
import json, sys
from tests.fleet_store import build_all, planner_prefixes
rows = build_all(sys.argv[1], sys.argv[2])  # fetches each export into the exports cache
plans = planner_prefixes(sys.argv[1], sys.argv[2])  # the farm's first stage: the specs cache, the cached record
print(json.dumps([sorted([r.model, r.outcome.target, r.outcome.status] for r in rows),
                  sorted([*k, *v] for k, v in plans.items())]))
"""


def test_builds_of_registered_exports_read_no_planted_export_or_spec(farm, shared, tmp_path):
    """A build fetches each export, the farm's planner its spec and record: planted ones are not read."""
    work, store, fleet, _ = farm
    answers = {}
    for name in ("clean", "hostile"):
        copy = tmp_path / name / "store"
        shutil.copytree(work / "store", copy)
        if name == "hostile":
            run_env = _hostile_world(shared, farm, shared / "xdg")[0]
            before = _snapshot(shared)
        else:
            run_env = _clean_env(tmp_path / name)
        done = subprocess.run([sys.executable, "-c", FARM_BUILD, copy.as_uri(), str(fleet)], cwd=REPO,
                              env={**os.environ, **run_env}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        answers[name] = json.loads(done.stdout.splitlines()[-1])
    assert answers["hostile"] == answers["clean"]
    assert ["encoder", "rtx4090-rtx1.7", "up-to-date"] in answers["clean"][0]
    assert _snapshot(shared) == before


# --- a damaged own cache (each garbage shape, whole files and single entries) is read again, never a crash: each
# cached entry is checked when read (its shape, and each value against its field's type) and the object read again

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
def test_a_damaged_own_cache_is_read_again_never_a_crash(farm, first_run, tmp_path, shape):
    filled, clean = first_run
    shutil.copytree(filled, tmp_path / "own", symlinks=True)  # the cache the first run filled, modes and times kept
    env = _clean_env(tmp_path / "own")
    cache = tmp_path / "own" / "cache" / "trtfarm"
    assert (cache / "survey").is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert _damage(cache, shape) > 0
    assert _views(farm, env, tmp_path) == clean
    assert _views(farm, env, tmp_path) == clean  # and again, from what the second run wrote
