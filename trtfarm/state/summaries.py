"""What fleet views need of each stored object, and a cache of it on this machine keyed by the object's version.

A ``ManifestSummary`` keeps the fields ``trtfarm whatif`` and ``trtfarm status`` read (target, toolchain, settings,
recipe, profiles, build time, checks); a ``PointerSummary`` the release pointer's last release; an ``OutcomeSummary``
one target's outcome in a run. ``SummaryCache`` holds them in one JSON file per store in the user's cache folder, each
beside the version a listing showed when it was read (``Store.list_versions``): a later view reads only the objects
whose version changed. The cache never decides anything the store does not say: an entry is used only while the
listing shows the same version, and a missing or unreadable cache file is an empty cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from dataclasses import dataclass, fields
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from trtfarm.cachedir import cache_dir
from trtfarm.layout import toolchain_label
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.plan_gate import plan_gate
from trtfarm.vocabulary.pointer import ReleasePointer

CACHE_FORMAT = 5  # 5: a manifest summary keeps its precision gate


class _Row:
    """A summary stored as one row of values.

    Its ``SHARED`` fields (big, and repeated across many rows: a target's settings, a model's profiles and digests)
    are stored once in the cache and referenced by their digest.
    """

    SHARED: tuple[str, ...] = ()
    MANY = False  # cached as a list of rows (one object holds many), not one row

    @classmethod
    def layout(cls) -> str:
        """The row's fields in order, each shared one marked ``@``: what a stored row says it holds."""
        return ",".join(("@" if f.name in cls.SHARED else "") + f.name for f in fields(cls))

    def to_row(self, intern) -> list:
        """The row for the cache: each shared field by ``intern(value)``."""
        return [intern(getattr(self, f.name)) if f.name in self.SHARED else getattr(self, f.name) for f in fields(self)]

    @classmethod
    def from_row(cls, row: list, shared: dict):
        """The summary of a cached row (``shared``: the cache's shared values); ``TypeError`` for another layout.

        Every value is checked against its field's type: a damaged cache is read again, never used.
        """
        marks = _SHARED_MARKS.get(cls)
        if marks is None:
            marks = _SHARED_MARKS.setdefault(cls, tuple(f.name in cls.SHARED for f in fields(cls)))
        if not isinstance(row, list) or len(row) != len(marks):
            raise TypeError(f"a cached {cls.__name__} that is not a row of {len(marks)} fields")
        values = [shared[v][1] if mark else v for mark, v in zip(marks, row, strict=True)]
        for value, types in zip(values, _field_types(cls), strict=True):
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise TypeError(f"a cached {cls.__name__} with a value of type {type(value).__name__}")
        return cls(*values)


_SHARED_MARKS: dict[type, tuple[bool, ...]] = {}  # per summary class: which of its fields are shared


def shared_ref(value) -> str:
    """The id a shared value is stored under, once: the first 16 hex digits of its canonical JSON's sha256."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
_TYPES = {"str": (str,), "int": (int,), "float": (float, int), "bool": (bool,), "dict": (dict,), "list": (list,),
          "None": (type(None),)}
_FIELD_TYPES: dict[type, list[tuple[type, ...]]] = {}


def _field_types(cls) -> list[tuple[type, ...]]:
    """The types each field of a summary class may hold, from its annotations (``str | None`` -> (str, NoneType))."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = [tuple(t for part in str(f.type).split("|") for t in _TYPES[part.strip()])
                             for f in fields(cls)]
    return _FIELD_TYPES[cls]


@dataclass(frozen=True, slots=True)
class ManifestSummary(_Row):
    """The fields of one manifest that fleet views use."""

    gpu: str
    gpu_name: str
    compute_capability: str
    compat_class: str
    flavour: str
    toolchain_version: str
    settings: dict
    recipe: str
    converted_digest: str
    onnx_digest: str
    exported_at: str | None
    created_at: str
    wall_s: float
    profiles: list
    engine: str
    failed: list  # "check: detail" of each failed verification
    refit: bool  # refitted from a parent plan (its wall time is not a build's)
    version_compatible: bool
    manifest_sha256: str
    plan_bytes: int
    gate: str  # the precision gate's verdict (vocabulary/plan_gate.py): passed, failed, not judged, not verified
    gate_text: str  # ``fp16 gate not judged (output 'y' is the same for every input)``
    SHARED = ("settings", "converted_digest", "onnx_digest", "profiles")

    @property
    def toolchain_label(self) -> str:
        """``tensorrt-11.4.0.106``."""
        return toolchain_label(self.flavour, self.toolchain_version)

    @classmethod
    def of(cls, m: Manifest, data: bytes) -> ManifestSummary:
        """The summary of manifest ``m`` (stored as ``data``)."""
        return cls(m.target.gpu, m.target.gpu_name, m.target.compute_capability, m.target.compat_class,
                   m.target.flavour, m.target.toolchain_version, m.build.settings, m.precision.recipe,
                   m.precision.converted_onnx_digest, m.model.onnx_digest, m.model.exported_at, m.created_at,
                   m.build.wall_s, m.build.profiles, m.verification.engine.status,
                   [f"{k}: {c.detail}" for k, c in m.verification if c.status == "failed"],
                   m.lineage.parent_manifest is not None, m.target.version_compatible,
                   hashlib.sha256(data).hexdigest(), m.plan.bytes, (gate := plan_gate(m)).verdict, gate.text())


@dataclass(frozen=True, slots=True)
class PointerSummary(_Row):
    """A release pointer: the manifest it names and the move that released it (a refresh is no release)."""

    manifest: str
    exported_at: str | None
    action: str
    at: str
    by: str
    reason: str
    SHARED = ("by", "reason")  # a run's pointers share who moved them and why

    @classmethod
    def of(cls, p: ReleasePointer) -> PointerSummary:
        """The summary of pointer ``p``."""
        e = p.released
        return cls(p.manifest, p.exported_at, e.action, e.at, e.by, e.reason)


@dataclass(frozen=True, slots=True)
class OutcomeSummary(_Row):
    """One target's outcome in a stored run (``reports/<model>/<run>/outcomes.json``).

    Only failures and skips are kept: a target a run built or found up to date is neither failed nor skipped.
    """

    target: str
    status: str
    reason: str
    build_digest: str | None
    SHARED = ("reason",)
    MANY = True


class SpecSummary(BaseModel):
    """What a registered export's build spec says for planning: recipe, profiles (None: derived), target ids."""

    model_config = ConfigDict(frozen=True)
    recipe: dict
    profiles: list[dict] | None = None
    targets: list[str] = []
    calibration: str | None = None  # the data files the precision step hashes, as the export names them
    heldout: str | None = None
    # farm.yaml declares promotion: (releases go to the candidate channel); required, so that an entry cached before
    # it was summarised is read again rather than taken for "no promotion"
    promotion: bool


class SummaryCache:
    """Summaries by (kind, key), each valid while the store's listing shows the version it was read at.

    One folder per store in the user's own cache folder (``cachedir``: ``survey/<sha256(store URI):16>/``, mode
    0700, checked to be this user's), one JSON file per kind of summary (and one of the values summaries share), each
    read the first time a view asks for that kind and written whole by rename. Two views running at once each write
    what they read; the last write wins, and either is a correct cache. A missing or damaged file is an empty cache
    of its kind, and a damaged entry (another shape, a value of another type) a miss: the object is read again.
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._lock = threading.RLock()
        self._kinds: dict[str, dict[str, list]] = {}
        self._dirty: set[str] = set()

    @classmethod
    def for_store(cls, store_uri: str) -> SummaryCache:
        """The cache of the store at ``store_uri`` in this user's own cache folder (``cachedir``); none without one."""
        return cls(cache_dir("survey", hashlib.sha256(store_uri.encode()).hexdigest()[:16]))

    def _kind(self, kind: str) -> dict[str, list]:
        found = self._kinds.get(kind)  # read once per kind and never replaced: no lock needed once it is there
        if found is not None:
            return found
        with self._lock:
            if kind not in self._kinds:
                found: dict = {}
                path = self.folder / f"{kind}.json" if self.folder else None
                try:
                    doc = json.loads(path.read_bytes()) if path and path.is_file() else {}
                    found = doc["entries"] if doc.get("format") == CACHE_FORMAT else {}
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    found = {}
                self._kinds[kind] = found if isinstance(found, dict) else {}
            return self._kinds[kind]

    def get(self, kind: str, key: str, version: str, model=None):
        """The cached value of ``key`` if it was read at ``version`` (a ``model`` or a list of them), else None."""
        entry = self._kind(kind).get(key)
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == version):
            return None  # absent, of another version, or not an entry this trtfarm writes
        value = entry[1]
        try:
            if model is None:
                return value
            if isinstance(model, type) and issubclass(model, BaseModel):  # kept as its JSON text (or a dict)
                return model.model_validate_json(value) if isinstance(value, str) else model.model_validate(value)
            shared = self._kind("shared")
            if model.MANY:  # a list of rows (a run's outcomes), possibly empty
                if not isinstance(value, list):
                    return None
                return [model.from_row(v, shared) for v in value]
            return model.from_row(value, shared)
        except (ValidationError, KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None  # an entry this version cannot read: read the object again

    def put(self, kind: str, key: str, version: str, value) -> None:
        """Remember ``value`` (a summary, a list of them, or plain JSON) for ``key`` at ``version``."""
        if isinstance(value, BaseModel):  # its JSON text: made and parsed by pydantic's core, not field by field
            value = value.model_dump_json()
        elif isinstance(value, _Row):
            value = value.to_row(self._intern)
        elif isinstance(value, list):
            value = [v.to_row(self._intern) if isinstance(v, _Row) else v for v in value]
        with self._lock:
            self._kind(kind)[key] = [version, value]
            self._dirty.add(kind)

    def _intern(self, value) -> str:
        """The id under which ``value`` is stored once (``shared_ref``)."""
        ref = shared_ref(value)
        with self._lock:
            shared = self._kind("shared")
            if ref not in shared:
                shared[ref] = [ref, value]
                self._dirty.add("shared")
        return ref

    def save(self) -> None:
        """Write the kinds that changed; a machine that cannot write them just keeps no cache."""
        if self.folder is None:
            return
        with self._lock:
            for kind in sorted(self._dirty):
                path = self.folder / f"{kind}.json"
                tmp = path.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}")
                try:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": self._kinds[kind]},
                                              separators=(",", ":")))
                    os.replace(tmp, path)
                except OSError:
                    with contextlib.suppress(OSError):
                        tmp.unlink(missing_ok=True)
            self._dirty.clear()
