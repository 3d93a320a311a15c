"""A download that a killed process leaves as one file the next one resumes: ``.<name>.<sha256:16>.part``.

The part file is named for its destination and the object's sha256, and locked while written. A later download of
the same object to the same place resumes it from its size with a ranged read (S3's ``Range``; the file store
seeks), hashing what is already there first; the part of another object (the release moved on) is removed. A
store that answers a ranged read with the whole object is read from the start, and the result says so. Ctrl-C and
SIGTERM remove the part (``scratch``): only a SIGKILL or a lost machine leaves one, and the next download takes it
over. The sha256 is checked before the part becomes ``dest`` (``os.replace``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from trtfarm.errors import IntegrityError, MismatchError
from trtfarm.scratch import _recorded
from trtfarm.store.base import Progress, Store

CHUNK = 1 << 20


class DownloadBusy(MismatchError):
    """Another process is writing the same download now."""


@dataclass(frozen=True)
class Downloaded:
    """A finished download: its size, and how it began (resumed, started over, or fresh)."""

    size: int
    note: str = ""


def part_path(dest: Path, sha256: str) -> Path:
    """Where a download of the object with ``sha256`` to ``dest`` is written until it is whole."""
    return dest.with_name(f".{dest.name}.{sha256[:16]}.part")


def _other_parts(dest: Path, keep: Path) -> list[Path]:
    return [p for p in dest.parent.glob(f".{dest.name}.*.part") if p != keep]


def download_resumable(store: Store, key: str, dest: Path, sha256: str, progress: Progress | None = None
                       ) -> Downloaded:
    """Download ``key`` to ``dest`` through its part file, resuming one a killed download left."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(dest, sha256)
    notes = []
    for stale in _other_parts(dest, part):  # another plan's: the release moved on since that download
        stale.unlink(missing_ok=True)
        notes.append(f"removed {stale.name}, a partial download of another plan")
    with _recorded(part), open(part, "ab+") as out:
        try:
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise DownloadBusy(f"{dest}: another pull is writing it now ({part.name}); wait for it to finish") \
                from err
        offset, digest = _hash_existing(out)
        stream, resumed = store.read_from(key, offset) if offset else store.read_from(key, 0)
        if offset and not resumed:
            notes.append(f"the store sent the whole object for a ranged read: started over ({offset:,} bytes were "
                         "there)")
            out.truncate(0)
            offset, digest = 0, hashlib.sha256()
        elif offset:
            notes.append(f"resumed a killed download at {offset:,} bytes")
            if progress:
                progress(offset)
        size = offset + _copy(stream, out, digest, progress)
        out.flush()
        if digest.hexdigest() != sha256:
            out.truncate(0)
            raise IntegrityError(f"{store.url(key)}: sha256 {digest.hexdigest()} does not match the manifest's "
                                 f"{sha256}; the stored plan is corrupt, rebuild it")
        os.replace(part, dest)
    return Downloaded(size, "; ".join(notes))


def _hash_existing(out) -> tuple[int, hashlib._Hash]:
    digest, size = hashlib.sha256(), 0
    out.seek(0)
    while chunk := out.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    out.seek(0, os.SEEK_END)
    return size, digest


def _copy(stream, out, digest, progress: Progress | None) -> int:
    moved = 0
    try:
        while chunk := stream.read(CHUNK):
            out.write(chunk)
            digest.update(chunk)
            moved += len(chunk)
            if progress:
                progress(len(chunk))
    finally:
        stream.close()
    return moved
