"""The artifact store interface: ids (keys) to bytes, with the conditional writes the publish protocol needs.

Keys are computed by ``trtfarm.identity``; a store never invents them. Every write is atomic: a reader sees the old
object or the new one, never a part.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from trtfarm.errors import StoreError

Progress = Callable[[int], None]  # called with the number of bytes just moved


class AlreadyExists(StoreError):
    """A create-only write found the key taken."""


class Conflict(StoreError):
    """A compare-and-swap found the object changed since it was read (or created, or deleted)."""


@dataclass(frozen=True)
class Blob:
    """An object's bytes and the ETag a compare-and-swap must name to replace it."""

    data: bytes
    etag: str


@dataclass(frozen=True)
class ListedObject:
    """One object as a listing describes it: its key, size, a version stamp and when it was last written.

    ``version`` changes whenever the object is rewritten (S3: its ETag; the file store: size and mtime), so a reader
    may keep what it derived from an object for as long as the listing shows the same version. It is not the ETag a
    compare-and-swap names (the file store's ETag is the content's sha256, which a listing cannot know).
    ``modified`` is seconds since the epoch.
    """

    key: str
    size: int
    version: str
    modified: float


@dataclass(frozen=True)
class Uploaded:
    """A finished streaming upload."""

    key: str
    sha256: str
    size: int


class HashingReader:
    """A read-only, non-seekable file wrapper that hashes (sha256) and counts what passes through it."""

    def __init__(self, f, progress: Progress | None = None) -> None:
        self._f, self._progress = f, progress
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes, hashing them on the way."""
        return self.consume(self._f.read(n))

    def consume(self, chunk: bytes) -> bytes:
        """Hash and count bytes obtained some other way (e.g. a streaming body's chunk iterator)."""
        self.sha256.update(chunk)
        self.size += len(chunk)
        if self._progress and chunk:
            self._progress(len(chunk))
        return chunk


def validate_key(key: str) -> str:
    """Refuse keys that could escape the store's root or collide with temporaries."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(p in {"", ".", ".."} for p in parts):
        raise StoreError(f"invalid store key {key!r}: use relative 'a/b/c' keys without '.', '..' or empty parts")
    if any(p.startswith(".tmp-") for p in parts):
        raise StoreError(f"invalid store key {key!r}: '.tmp-' names are reserved for in-flight writes")
    return key


class Store(ABC):
    """One interface, two backends (``file://`` and ``s3://``)."""

    uri: str
    # True: a listing is a sequence of pages, one request each (S3); a long one is faster as parts side by side
    paged_listings = False
    # True: a listed version of an object written in one request is the MD5 of its bytes (S3's ETag), so a copy of
    # the bytes kept elsewhere proves itself against the listing (state/record_index.py)
    md5_versions = False
    # True: a request waits on a network (S3, a network file system), so requests side by side overlap their waits;
    # False: each is this process's own CPU (a local disk), and threads side by side only contend for it
    waits_on_network = False

    @abstractmethod
    def get(self, key: str) -> Blob | None:
        """Return the object and its ETag, or None when absent."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object; False (and nothing written) when the key exists."""

    @abstractmethod
    def compare_and_swap(self, key: str, data: bytes, etag: str | None) -> str:
        """Replace the object only if its ETag is still ``etag`` (None: only if absent); return the new ETag.

        Raises ``Conflict`` when someone else wrote in between.
        """

    @abstractmethod
    def upload_file(self, key: str, path: Path, progress: Progress | None = None) -> Uploaded:
        """Stream a file to a new key, computing sha256 on the way; ``AlreadyExists`` if the key is taken."""

    @abstractmethod
    def download_file(self, key: str, dest: Path, sha256: str | None = None, progress: Progress | None = None) -> int:
        """Stream an object to ``dest`` atomically; with ``sha256``, refuse (``IntegrityError``) on a mismatch."""

    def read_from(self, key: str, offset: int):
        """A readable stream of the object from byte ``offset`` on, and whether the store honoured the offset.

        ``(stream, False)`` means the stream starts at byte 0 (a store that does not do ranged reads). Used to
        resume a download (store/resume.py).
        """
        raise NotImplementedError(f"{type(self).__name__} has no ranged reads")

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield the keys under ``prefix``, in order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object (absent is fine)."""

    @abstractmethod
    def url(self, key: str) -> str:
        """A URI for the object that a person can open or copy."""

    @property
    def location(self) -> str:
        """The store as people name it, for messages (a local store's folder as written, not percent-encoded)."""
        return self.uri

    def share_url(self, key: str, expires_s: int = 7 * 24 * 3600) -> str | None:
        """A link anyone holding it can open for ``expires_s`` seconds (a presigned URL); None without one.

        A file store has none: only this machine can read it.
        """
        return None

    def exists(self, key: str) -> bool:
        """True when the key holds an object."""
        return self.get(key) is not None

    def etag(self, key: str) -> str | None:
        """The object's ETag (None when absent), without fetching it where the backend allows."""
        blob = self.get(key)
        return blob.etag if blob else None

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Yield ``(key, size)`` under ``prefix`` (backends answer from their listing)."""
        for key in self.list(prefix):
            size = self.size(key)
            if size is not None:
                yield key, size

    def list_versions(self, prefix: str = "") -> Iterator[ListedObject]:
        """Yield each object under ``prefix`` with its size, version and time (backends answer from their listing).

        This default asks one request per object; both backends override it with their own listing.
        """
        for key, size in self.list_sizes(prefix):
            etag = self.etag(key)
            if etag is not None:
                yield ListedObject(key, size, etag, 0.0)

    def list_versions_between(self, prefix: str, after: str | None = None,
                              upto: str | None = None) -> Iterator[ListedObject]:
        """``list_versions(prefix)``'s objects whose key sorts after ``after`` and not after ``upto`` (None: no bound).

        A part of a listing: parts split at keys (``a < k <= b``) cover it once, each in its own order.
        """
        for obj in self.list_versions(prefix):
            if upto is not None and obj.key > upto:
                return
            if after is None or obj.key > after:
                yield obj

    def sweep_temporaries(self, prefix: str, older_than_s: float) -> int:
        """Remove in-flight write files that a killed writer left under ``prefix``; returns how many.

        Object stores have none (an upload is invisible until it completes); the file store overrides this.
        """
        return 0

    def size(self, key: str) -> int | None:
        """The object's size in bytes (None when absent), without fetching it where the backend allows."""
        blob = self.get(key)
        return len(blob.data) if blob else None


class InPlace(Executor):
    """An executor that runs each call where it is submitted, one after the other (``side_by_side``'s one worker).

    A call's error is handed back through its future, as a thread pool does. A stop (Ctrl-C, SIGTERM: raised in
    this thread by ``interrupt.py``) is not: it leaves at once, and no later call runs.
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:  # noqa: D102
        done: Future = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as err:  # noqa: BLE001 - handed back through the future, as a thread pool does
            done.set_exception(err)
        return done


def side_by_side(store: Store, workers: int) -> Executor:
    """Up to ``workers`` threads for this store's requests where they wait on a network, else each in turn.

    On a local disk a listing or a read is the process's own CPU: threads beside each other only hand the
    interpreter's lock back and forth (a cold ``status`` of 1,000 models spent a fifth of its CPU on that).
    """
    if not store.waits_on_network:
        return InPlace()
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=max(1, workers))
