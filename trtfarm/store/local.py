"""``file://`` store: a directory. The embedded default, and what a single machine needs.

Create-only writes are ``os.link`` of a finished temporary file (atomic, fails if the name exists);
compare-and-swap holds an ``flock`` on a per-key lock file and replaces with ``os.replace``. ETags are the sha256
of the content. Opening a store creates nothing: folders appear with the first write under them, so reading a path
that is not there (a typo, a URI from a webhook post) leaves no trace.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import operator
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote_from_bytes

from trtfarm.errors import IntegrityError, StoreError
from trtfarm.scratch import scratch_file
from trtfarm.store.base import (
    AlreadyExists,
    Blob,
    Conflict,
    HashingReader,
    ListedObject,
    Progress,
    Store,
    Uploaded,
    validate_key,
)

CHUNK = 1 << 20
_NAME = operator.attrgetter("name")  # a directory entry's name (sorting by it without a Python call per entry)
F = TypeVar("F", bound=Callable)


def _os_errors(doing: str) -> Callable[[F], F]:
    """Translate the filesystem's errors into one ``StoreError`` naming the store, the key and the OS reason.

    The one place the file store's ``OSError`` s enter trtfarm (read-only, full, a file where the store's folder
    should be, permissions). The temporaries of a failed write are removed by ``scratch_file`` on the way out.
    """
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def translated(self: LocalStore, key: str, *args, **kwargs):
            with self.translated(doing, key):
                return method(self, key, *args, **kwargs)
        return translated  # type: ignore[return-value]
    return wrap


class LocalStore(Store):
    """A store rooted at a local directory (created by the first write, not by opening)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.uri = self.root.as_uri()
        self._under = os.path.join(str(self.root), "")  # the root's path with its separator: what keys resolve under

    @functools.cached_property
    def waits_on_network(self) -> bool:  # type: ignore[override]
        """True when the store's folder is on a network file system (NFS, SMB, CephFS, Lustre, a FUSE mount...)."""
        return network_mount(str(self.root))

    @property
    def location(self) -> str:
        """The folder as written (``file://`` URIs percent-encode spaces, brackets and non-ASCII letters)."""
        return str(self.root)

    @contextmanager
    def translated(self, doing: str, key: str):
        """The one place the file store's ``OSError`` s become a ``StoreError`` (every operation, listings too)."""
        try:
            yield
        except StoreError:
            raise
        except OSError as err:
            raise StoreError(self.describe(err, doing, key)) from err

    def _check_root(self) -> None:
        """A store root that is a file (or under one) is refused, not read as an empty store."""
        blocker = next((p for p in (self.root, *self.root.parents) if p.is_file()), None)
        if blocker is not None:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocker))

    def describe(self, err: OSError, doing: str, key: str) -> str:
        """One line: the store, what failed, the OS reason, and the fix when there is an obvious one."""
        reason = err.strerror or type(err).__name__
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(self.root / key) else ""
        fix = {errno.ENOSPC: "free space there (nothing was published half-way) and run again",
               errno.EDQUOT: "free space there (nothing was published half-way) and run again",
               errno.EROFS: "the filesystem is mounted read-only; give a writable --store",
               errno.EACCES: "give trtfarm write access there, or another --store",
               errno.EPERM: "give trtfarm write access there, or another --store"}.get(err.errno, "")
        if any(p.is_file() for p in (self.root, *self.root.parents)):
            blocker = next(p for p in (self.root, *self.root.parents) if p.is_file())
            fix = f"{blocker} is a file, not a folder; give --store a folder (or a path that does not exist yet)"
        return f"store {self.root}: cannot {doing} {key}: {reason}{where}" + (f"; {fix}" if fix else "")

    def _file(self, key: str) -> str:
        """The key's file, symlinks resolved; refused when it resolves outside the root (as ``Path.resolve``, on str).

        On plain strings: a fleet view asks this of 80,000 keys, where pathlib's parsing cost more than the reads.
        """
        path = os.path.realpath(self._under + validate_key(key))
        if not path.startswith(self._under):
            raise StoreError(f"store key {key!r} resolves outside the store root {self.root}")
        return path

    def _path(self, key: str) -> Path:
        """``_file`` as a ``Path``."""
        return Path(self._file(key))

    @contextmanager
    def _temp_beside(self, path: Path):
        with scratch_file(path.parent) as tmp:
            for attempt in range(20):
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp.touch(exist_ok=False)  # the folder is not empty now: a concurrent delete() keeps it
                    break
                except (FileNotFoundError, FileExistsError):  # a delete() pruned the folder under us: again
                    if attempt == 19:
                        raise
            yield tmp

    @contextmanager
    def _locked(self, key: str):
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / hashlib.sha256(key.encode()).hexdigest(), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _write(tmp: Path, data: bytes) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @_os_errors("read")
    def read_from(self, key: str, offset: int):
        """The object's file, opened at ``offset`` (a file seeks: always honoured)."""
        src = self._path(key)
        if not src.is_file():
            raise StoreError(f"{self.url(key)} does not exist")
        f = open(src, "rb")
        f.seek(offset)
        return f, True

    @_os_errors("read")
    def get(self, key: str) -> Blob | None:
        """Return the object and its ETag (content sha256), or None."""
        try:
            with open(self._file(key), "rb") as f:
                data = f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):  # a file where a folder would be: no key
            return None
        return Blob(data, hashlib.sha256(data).hexdigest())

    @_os_errors("write")
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object atomically; False when it exists."""
        path = self._path(key)
        with self._temp_beside(path) as tmp:
            self._write(tmp, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        return True

    @_os_errors("write")
    def compare_and_swap(self, key: str, data: bytes, etag: str | None) -> str:
        """Replace only if unchanged since ``etag`` was read (None: only if absent)."""
        path = self._path(key)
        with self._locked(key):
            current = self.get(key)
            if (current.etag if current else None) != etag:
                raise Conflict(f"{key}: changed since it was read (expected ETag {etag}, found "
                               f"{current.etag if current else 'no object'})")
            with self._temp_beside(path) as tmp:
                self._write(tmp, data)
                os.replace(tmp, path)
        return hashlib.sha256(data).hexdigest()

    @_os_errors("write")
    def upload_file(self, key: str, path: Path, progress: Progress | None = None) -> Uploaded:
        """Copy a file in, hashing on the way; create-only."""
        dest = self._path(key)
        with self._temp_beside(dest) as tmp, open(path, "rb") as src, open(tmp, "wb") as out:
            reader = HashingReader(src, progress)
            while chunk := reader.read(CHUNK):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
            try:
                os.link(tmp, dest)
            except FileExistsError as err:
                raise AlreadyExists(f"{key} already exists") from err
        return Uploaded(key, reader.sha256.hexdigest(), reader.size)

    @_os_errors("read")
    def download_file(self, key: str, dest: Path, sha256: str | None = None, progress: Progress | None = None) -> int:
        """Copy an object out atomically, checking its sha256."""
        src = self._path(key)
        if not src.is_file():
            raise StoreError(f"{self.url(key)} does not exist")
        dest = Path(dest)
        with self._temp_beside(dest) as tmp, open(src, "rb") as f, open(tmp, "wb") as out:
            reader = HashingReader(f, progress)
            while chunk := reader.read(CHUNK):
                out.write(chunk)
            out.close()
            if sha256 and reader.sha256.hexdigest() != sha256:
                raise IntegrityError(f"{self.url(key)}: sha256 {reader.sha256.hexdigest()} does not match the "
                                     f"manifest's {sha256}; the stored plan is corrupt, rebuild it")
            os.replace(tmp, dest)
        return reader.size

    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield keys under ``prefix`` (no temporaries, no lock files)."""
        for key, _ in self.list_sizes(prefix):
            yield key

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Yield ``(key, size)`` under ``prefix``, walking only the folder the prefix names."""
        with self.translated("list", prefix or "(root)"):
            yield from self._walk(prefix)

    def list_versions(self, prefix: str = "") -> Iterator[ListedObject]:
        """Yield each object under ``prefix`` with its size, version (size and mtime in ns) and mtime."""
        with self.translated("list", prefix or "(root)"):
            for key, stat in self._walk(prefix, stats=True):
                yield ListedObject(key, stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}", stat.st_mtime)

    def _walk(self, prefix: str, stats: bool = False) -> Iterator[tuple[str, int]]:
        """``(key, size)`` (or ``(key, stat)``) under ``prefix``, in key order: a folder's files, then its folders.

        One ``scandir`` per folder and one ``stat`` per file, on plain strings: a listing of 60,000 objects in
        20,000 folders (a fleet of 1,000 models x 20 targets) is a scan of the tree, not of pathlib objects.
        """
        self._check_root()
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        if ".." in Path(prefix).parts or not (self.root / folder).is_dir():
            return
        yield from self._scan(os.path.join(str(self.root), folder) if folder else str(self.root),
                              f"{folder}/" if folder else "", prefix, stats)

    def _scan(self, path: str, rel: str, prefix: str, stats: bool) -> Iterator[tuple[str, int]]:
        """The walk, depth first from a stack (a folder's files in name order, then its folders in name order).

        A stack rather than nested generators: each key is yielded once, not passed up through every folder level.
        """
        stack = [(path, rel)]
        while stack:
            path, rel = stack.pop()
            try:
                with os.scandir(path) as it:
                    entries = sorted(it, key=_NAME)
            except FileNotFoundError:  # a folder deleted while we walked (gc): as if it was never there
                continue
            folders = []
            inside = rel.startswith(prefix)  # every key of this folder is under the prefix
            for entry in entries:
                name = entry.name
                if entry.is_dir():
                    if name != ".locks" and not entry.is_symlink():
                        folders.append(entry)
                    continue
                key = rel + name
                if name.startswith(".tmp-") or not (inside or key.startswith(prefix)):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # deleted while we walked
                    continue
                yield key, stat if stats else stat.st_size
            for entry in reversed(folders):
                sub = f"{rel}{entry.name}/"
                if sub.startswith(prefix) or prefix.startswith(sub):
                    stack.append((entry.path, sub))

    @_os_errors("delete")
    def delete(self, key: str) -> None:
        """Remove an object and any folders it leaves empty."""
        path = self._path(key)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()  # only if empty
            except OSError:  # not empty (a writer's file, a sibling key), or another delete removed it: stop
                break
            parent = parent.parent

    def sweep_temporaries(self, prefix: str, older_than_s: float) -> int:
        """Remove ``.tmp-*`` files under ``prefix`` older than ``older_than_s`` (a killed writer's leftovers)."""
        start = self.root / prefix.rstrip("/") if prefix else self.root
        if ".." in Path(prefix).parts or not start.is_dir():
            return 0
        removed, now = 0, time.time()
        with self.translated("sweep temporaries under", prefix or "(root)"):
            for path in start.rglob(".tmp-*"):
                try:
                    if now - path.stat().st_mtime > older_than_s:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:  # its writer finished, or another sweep took it
                    continue
        return removed

    @_os_errors("read")
    def size(self, key: str) -> int | None:
        """The file's size, or None when absent."""
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    def url(self, key: str) -> str:
        """``file://`` URI of the object (a key of plain parts joined as a string: what ``as_uri`` gives it)."""
        if key and all(part not in ("", ".") for part in key.split("/")):
            return self.uri.removesuffix("/") + "/" + quote_from_bytes(os.fsencode(key))
        return (self.root / key).as_uri()


NETWORK_FILE_SYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
                        "wekafs", "9p", "afs", "ocfs2", "gfs2", "davfs", "sshfs")
LOCAL_FUSE = ("fuse.lxcfs", "fuse.fuse-overlayfs")  # FUSE mounts of this machine's own disks


def network_mount(path: str, mounts: str = "/proc/self/mounts") -> bool:
    """True when ``path`` lies on a network file system, by the longest mount point above it (False if unknown)."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as lines:
            table = [line.split()[1:3] for line in lines if len(line.split()) > 2]
    except OSError:
        return False
    here = os.path.join(os.path.realpath(path), "")
    best, fstype = "", ""
    for point, kind in table:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)  # the table's octal escapes
        if here.startswith(os.path.join(point, "")) and len(point) >= len(best):
            best, fstype = point, kind
    return fstype.split(".")[0] in NETWORK_FILE_SYSTEMS or fstype.startswith("fuse.") and fstype not in LOCAL_FUSE

