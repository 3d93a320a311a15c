"""``s3://bucket/prefix`` store over boto3: AWS S3, MinIO or any S3-compatible server.

Its client, timeouts, retries and the translation of boto's errors are ``s3_client.py``'s; this module says which
object each request is for and what a conditional write's answer means. Create-only writes use ``IfNoneMatch='*'``,
compare-and-swap ``IfMatch=etag``. Streaming uploads go through s3transfer (multipart above the threshold);
s3transfer rejects ``IfNoneMatch`` in ExtraArgs, so a botocore event hook adds it to the PutObject /
CompleteMultipartUpload of keys being created.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

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
from trtfarm.store.s3_client import (
    BOTO_ERRORS,
    client_for,
    is_missing,
    is_precondition_failed,
    retry_conflicts,
    translated,
)

MULTIPART_THRESHOLD = 64 << 20

# Streaming uploads in flight, per (bucket, key): their PutObject / CompleteMultipartUpload must be create-only.
# A count, not a set: two threads may upload the same key, and the first to finish must not unmark the other.
_CREATING: Counter[tuple[str, str]] = Counter()
_CREATING_LOCK = threading.Lock()


def _add_if_none_match(params: dict, **_: object) -> None:
    with _CREATING_LOCK:
        if _CREATING[(params.get("Bucket", ""), params.get("Key", ""))] and "IfMatch" not in params:
            params["IfNoneMatch"] = "*"


class _TranslatedBody:
    """A streaming body whose read errors (a timeout mid-stream) come out as the store's error."""

    def __init__(self, body, store: S3Store, key: str) -> None:
        self._body, self._store, self._key = body, store, key

    def read(self, n: int = -1) -> bytes:
        try:
            return self._body.read(n)
        except BOTO_ERRORS as err:
            raise self._store._failed(err, self._key, "read") from err

    def close(self) -> None:
        self._body.close()


class S3Store(Store):
    """A store under ``s3://bucket/prefix``."""

    paged_listings = True
    md5_versions = True
    waits_on_network = True

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 multipart_threshold: int = MULTIPART_THRESHOLD, client=None) -> None:
        from boto3.s3.transfer import TransferConfig

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.client = client or client_for(endpoint_url)
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold, multipart_chunksize=16 << 20,
                                        preferred_transfer_client="classic")
        self._pager, self._pager_lock = None, threading.Lock()
        events = self.client.meta.events  # the client is shared: register once per client (unique_id), not per store
        for event in ("before-parameter-build.s3.PutObject", "before-parameter-build.s3.CompleteMultipartUpload"):
            events.register(event, _add_if_none_match, unique_id=f"trtfarm-create-only:{event}")

    def _failed(self, err: Exception, key: str, doing: str) -> StoreError:
        """The error boto raised, translated (``s3_client.translated``), naming the object (a prefix like a key).

        The name is spelled without validating it again: a listing's prefix (``plans/``) is no key, and a translation
        that raised on it would hide the endpoint's failure behind an "invalid store key".
        """
        where = f"s3://{self.bucket}/{'/'.join(p for p in (self.prefix, key) if p)}"
        return translated(err, self.client.meta.endpoint_url, where, doing)

    def _k(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def read_from(self, key: str, offset: int):
        """A ranged GET (``Range: bytes=offset-``); an answer without ``Content-Range`` is the whole object."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key),
                                          **({"Range": f"bytes={offset}-"} if offset else {}))
        except BOTO_ERRORS as err:
            raise self._failed(err, key, "read") from err
        return _TranslatedBody(resp["Body"], self, key), bool(offset) and "ContentRange" in resp

    def get(self, key: str) -> Blob | None:
        """Return the object and its ETag, or None."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
            return Blob(resp["Body"].read(), resp["ETag"])  # the body streams: a timeout can come while reading it
        except BOTO_ERRORS as err:
            if is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def etag(self, key: str) -> str | None:
        """HEAD the object: its ETag, or None."""
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._k(key))["ETag"]
        except BOTO_ERRORS as err:
            if is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def size(self, key: str) -> int | None:
        """HEAD the object: its size, or None."""
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self._k(key))["ContentLength"])
        except BOTO_ERRORS as err:
            if is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def _put(self, key: str, data: bytes, **cond: str) -> str:
        return retry_conflicts(lambda: self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data,
                                                               **cond)["ETag"])

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object (``IfNoneMatch='*'``); False when it exists."""
        try:
            self._put(key, data, IfNoneMatch="*")
        except BOTO_ERRORS as err:
            if is_precondition_failed(err):
                return False
            raise self._failed(err, key, "write") from err
        return True

    def compare_and_swap(self, key: str, data: bytes, etag: str | None) -> str:
        """Write with ``IfMatch=etag`` (or ``IfNoneMatch='*'`` when etag is None)."""
        cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            return self._put(key, data, **cond)
        except BOTO_ERRORS as err:
            if is_precondition_failed(err) or (etag and is_missing(err)):
                raise Conflict(f"{self.url(key)}: changed since it was read") from err
            raise self._failed(err, key, "write") from err

    def upload_file(self, key: str, path: Path, progress: Progress | None = None) -> Uploaded:
        """Stream through s3transfer (multipart when large), hashing on the way; create-only."""
        full = self._k(key)
        with _CREATING_LOCK:
            _CREATING[(self.bucket, full)] += 1

        def send() -> HashingReader:
            with open(path, "rb") as f:
                reader = HashingReader(f, progress)
                self.client.upload_fileobj(reader, self.bucket, full, Config=self._transfer)
            return reader

        try:
            reader = retry_conflicts(send)
        except BOTO_ERRORS as err:
            if is_precondition_failed(err):
                raise AlreadyExists(f"{self.url(key)} already exists") from err
            raise self._failed(err, key, "upload") from err
        finally:
            with _CREATING_LOCK:
                _CREATING[(self.bucket, full)] -= 1
                if not _CREATING[(self.bucket, full)]:
                    del _CREATING[(self.bucket, full)]
        return Uploaded(key, reader.sha256.hexdigest(), reader.size)

    def download_file(self, key: str, dest: Path, sha256: str | None = None, progress: Progress | None = None) -> int:
        """Stream the object to a temporary beside ``dest``, check sha256, then rename into place."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with scratch_file(dest.parent) as tmp:
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self._k(key))["Body"]
                with open(tmp, "wb") as out:
                    reader = HashingReader(body, progress)
                    while chunk := reader.read(1 << 20):  # the body streams: a timeout can come while reading it
                        out.write(chunk)
            except BOTO_ERRORS as err:
                raise self._failed(err, key, "read") from err
            if sha256 and reader.sha256.hexdigest() != sha256:
                raise IntegrityError(f"{self.url(key)}: sha256 {reader.sha256.hexdigest()} does not match the "
                                     f"manifest's {sha256}; the stored plan is corrupt, rebuild it")
            os.replace(tmp, dest)
            return reader.size

    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield keys under ``prefix``."""
        for key, _ in self.list_sizes(prefix):
            yield key

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Yield ``(key, size)`` under ``prefix``: one paginated listing, no request per object."""
        for obj in self.list_versions(prefix):
            yield obj.key, obj.size

    def list_versions(self, prefix: str = "") -> Iterator[ListedObject]:
        """Yield each object under ``prefix`` with its size, ETag and LastModified: one paginated listing."""
        return self.list_versions_between(prefix)

    def list_versions_between(self, prefix: str, after: str | None = None,
                              upto: str | None = None) -> Iterator[ListedObject]:
        """A part of a listing: pages from after ``after`` (``StartAfter``) until a key passes ``upto``."""
        full = self._k(prefix.rstrip("/")) if prefix else self.prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        start = {"StartAfter": f"{self.prefix}/{after}" if self.prefix else after} if after else {}
        pages = self._listing_pager().paginate(Bucket=self.bucket, Prefix=full, **start)
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"][strip:]
                    if upto is not None and key > upto:
                        return
                    if key.startswith(prefix):
                        yield ListedObject(key, int(obj["Size"]), obj["ETag"], obj["LastModified"].timestamp())
        except BOTO_ERRORS as err:
            raise self._failed(err, prefix, "list") from err

    def _listing_pager(self):
        """ListObjectsV2's paginator, made once per store.

        A cold view's listings start together on 16 threads: each that made its own read botocore's list of services
        from disk, side by side.
        """
        with self._pager_lock:
            if self._pager is None:
                self._pager = self.client.get_paginator("list_objects_v2")
            return self._pager

    def delete(self, key: str) -> None:
        """Delete the object."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._k(key))
        except BOTO_ERRORS as err:
            raise self._failed(err, key, "delete") from err

    def url(self, key: str) -> str:
        """``s3://`` URI of the object."""
        return f"s3://{self.bucket}/{self._k(key)}"

    def share_url(self, key: str, expires_s: int = 7 * 24 * 3600) -> str | None:
        """A presigned GET URL of the object, valid ``expires_s`` seconds (signed locally: no request is made)."""
        return self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": self._k(key)},
                                                  ExpiresIn=expires_s)
