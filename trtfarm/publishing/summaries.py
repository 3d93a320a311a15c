"""What fleet views need of each stored object, and a cache of it on this machine keyed by the object's version.

A ``ManifestSummary`` keeps the fields ``trtfarm plan`` and ``trtfarm status`` read (target, toolchain, settings,
recipe, profiles, build time, checks); a ``PointerSummary`` the release pointer's current move; an ``OutcomeSummary``
one target's outcome in a run. ``SummaryCache`` holds them in one JSON file per store under the temporary folder, each
beside the version a listing showed when it was read (``Store.list_versions``): a later view reads only the objects
whose version changed. The cache never decides anything the store does not say: an entry is used only while the
listing shows the same version, and a missing or unreadable cache file is an empty cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.pointer import ReleasePointer

CACHE_FORMAT = 1


class _Summary(BaseModel):
    model_config = ConfigDict(frozen=True)


class ManifestSummary(_Summary):
    """The fields of one manifest that fleet views use."""

    target_id: str
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
    exported_at: str | None = None
    created_at: str
    wall_s: float
    plan_bytes: int
    profiles: list[dict]
    build_digest: str
    engine: str
    failed: list[str] = []  # "check: detail" of each failed verification
    refit: bool = False  # refitted from a parent plan (its wall time is not a build's)
    version_compatible: bool = False
    manifest_sha256: str

    @property
    def toolchain_label(self) -> str:
        """``tensorrt-11.4.0.106``."""
        return f"{self.flavour}-{self.toolchain_version}"

    @classmethod
    def of(cls, m: Manifest, data: bytes) -> ManifestSummary:
        """The summary of manifest ``m`` (stored as ``data``)."""
        return cls(target_id=m.target.target_id, gpu=m.target.gpu, gpu_name=m.target.gpu_name,
                   compute_capability=m.target.compute_capability, compat_class=m.target.compat_class,
                   flavour=m.target.flavour, toolchain_version=m.target.toolchain_version, settings=m.build.settings,
                   recipe=m.precision.recipe, converted_digest=m.precision.converted_onnx_digest,
                   onnx_digest=m.model.onnx_digest, exported_at=m.model.exported_at, created_at=m.created_at,
                   wall_s=m.build.wall_s, plan_bytes=m.plan.bytes, profiles=m.build.profiles,
                   build_digest=m.build.build_digest, engine=m.verification.engine.status,
                   failed=[f"{k}: {c.detail}" for k, c in m.verification if c.status == "failed"],
                   refit=m.lineage.parent_manifest is not None, version_compatible=m.target.version_compatible,
                   manifest_sha256=hashlib.sha256(data).hexdigest())


class PointerSummary(_Summary):
    """A release pointer: the manifest it names and its current move."""

    manifest: str
    onnx_digest: str
    build_digest: str
    exported_at: str | None = None
    action: str
    at: str
    by: str
    reason: str

    @classmethod
    def of(cls, p: ReleasePointer) -> PointerSummary:
        """The summary of pointer ``p``."""
        e = p.current
        return cls(manifest=p.manifest, onnx_digest=p.onnx_digest, build_digest=p.build_digest,
                   exported_at=p.exported_at, action=e.action, at=e.at, by=e.by, reason=e.reason)


class OutcomeSummary(_Summary):
    """One target's outcome in a stored run (``reports/<model>/<run>/outcomes.json``)."""

    target: str
    status: str
    reason: str = ""
    build_digest: str | None = None


class SpecSummary(_Summary):
    """What a registered export's build spec says for planning: recipe, profiles (None: derived), target ids."""

    recipe: dict
    profiles: list[dict] | None = None
    targets: list[str] = []
    calibration: str | None = None  # the data files the precision step hashes, as the export names them
    heldout: str | None = None


class SummaryCache:
    """Summaries by (kind, key), each valid while the store's listing shows the version it was read at.

    One file per store: ``$TMPDIR/trtfarm/survey/<sha256(store URI):16>.json``, written whole by rename. Two views
    running at once each write what they read; the last write wins, and either is a correct cache.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, list]] = {}
        self._dirty = False
        if path is not None and path.is_file():
            try:
                doc = json.loads(path.read_bytes())
                if doc.get("format") == CACHE_FORMAT:
                    self._entries = doc["entries"]
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._entries = {}  # a damaged cache is an empty one

    @classmethod
    def for_store(cls, store_uri: str) -> SummaryCache:
        """The cache file of the store at ``store_uri``."""
        name = hashlib.sha256(store_uri.encode()).hexdigest()[:16]
        return cls(Path(tempfile.gettempdir()) / "trtfarm" / "survey" / f"{name}.json")

    def get(self, kind: str, key: str, version: str, model: type[_Summary] | None = None):
        """The cached value of ``key`` if it was read at ``version`` (parsed as ``model``), else None."""
        entry = self._entries.get(kind, {}).get(key)
        if entry is None or entry[0] != version:
            return None
        if model is None:
            return entry[1]
        try:
            return model.model_validate(entry[1]) if isinstance(entry[1], dict) else \
                [model.model_validate(v) for v in entry[1]]
        except ValidationError:
            return None

    def put(self, kind: str, key: str, version: str, value) -> None:
        """Remember ``value`` (a summary, a list of them, or plain JSON) for ``key`` at ``version``."""
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        elif isinstance(value, list):
            value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
        with self._lock:
            self._entries.setdefault(kind, {})[key] = [version, value]
            self._dirty = True

    def forget_missing(self, kind: str, keys: set[str]) -> None:
        """Drop the entries of ``kind`` whose keys the store no longer lists."""
        with self._lock:
            entries = self._entries.get(kind, {})
            gone = [k for k in entries if k not in keys]
            for k in gone:
                del entries[k]
            self._dirty = self._dirty or bool(gone)

    def save(self) -> None:
        """Write the cache (when something changed); a machine that cannot write it just keeps no cache."""
        if self.path is None or not self._dirty:
            return
        tmp = self.path.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{self.path.name}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": self._entries}, separators=(",", ":")))
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
