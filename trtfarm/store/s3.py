"""``s3://bucket/prefix`` store over boto3: AWS S3, MinIO or any S3-compatible server.

The endpoint comes from boto3's own settings (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, profiles) or the
``endpoint_url`` argument. An endpoint that stops answering costs at most its timeouts times its attempts, then one
``StoreUnavailable`` line naming the endpoint, the last error and the tries: ``TRTFARM_S3_CONNECT_TIMEOUT`` (seconds,
default 5), ``TRTFARM_S3_READ_TIMEOUT`` (default 20) and ``TRTFARM_S3_MAX_ATTEMPTS`` (tries per request, first
included, default 3). Each retry is logged (``trtfarm.store``) at INFO, which ``-v`` shows; a timeout's wait, the
first per endpoint, also at WARNING (a silent wait looks hung). Missing or broken credentials name what to set.

Create-only writes use ``IfNoneMatch='*'``, compare-and-swap ``IfMatch=etag``. Streaming
uploads go through s3transfer (multipart above the threshold); s3transfer rejects ``IfNoneMatch`` in ExtraArgs, so a
botocore event hook adds it to the PutObject / CompleteMultipartUpload of keys being created.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)

from trtfarm.errors import IntegrityError, StoreError, StoreUnavailable, UserInputError
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

T = TypeVar("T")
MULTIPART_THRESHOLD = 64 << 20
_RETRIES = 5


def _code(err: Exception) -> str:
    resp = getattr(err, "response", None) or {}
    return str(resp.get("Error", {}).get("Code", "")) or str(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _is_precondition_failed(err: Exception) -> bool:
    return _code(err) in {"PreconditionFailed", "412"}


def _is_conflict_retry(err: Exception) -> bool:
    return _code(err) in {"ConditionalRequestConflict", "409"}


_CLIENTS: dict[tuple, object] = {}
_CLIENTS_LOCK = threading.Lock()
log = logging.getLogger("trtfarm.store")
NO_ANSWER = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)
TIMEOUTS = {"TRTFARM_S3_CONNECT_TIMEOUT": 5.0, "TRTFARM_S3_READ_TIMEOUT": 20.0, "TRTFARM_S3_MAX_ATTEMPTS": 3}


def timeouts() -> tuple[float, float, int]:
    """(connect timeout s, read timeout s, attempts per request) from the environment; a bad value is refused."""
    values = []
    for name, default in TIMEOUTS.items():
        text = os.environ.get(name)
        try:
            value = type(default)(text) if text else default
        except ValueError:
            value = 0
        if not value > 0:
            raise UserInputError(f"{name}={text!r}: give a positive number (default {default})")
        values.append(value)
    return values[0], values[1], values[2]


_WAITS_SAID: set[str] = set()  # endpoints whose timeout was said at WARNING in this process (once each)


def _log_retry(attempts: int = 0, caught_exception: Exception | None = None, request_dict: dict | None = None,
               **_: object) -> None:
    """Log, before botocore waits and tries again, that the endpoint did not answer: INFO each time (``-v``).

    A timeout (the endpoint accepts and stays silent) is also said once per endpoint at WARNING, since its wait is
    long; a refused connection is retried at once, and its failure is one line naming the tries.
    """
    _, read, total = timeouts()
    if not isinstance(caught_exception, NO_ANSWER) or attempts >= total:
        return
    url = (request_dict or {}).get("url", "the endpoint").split("?")[0]
    args = (url, type(caught_exception).__name__, attempts + 1, total, read)
    endpoint = url.split("/")[2] if url.count("/") >= 2 else url
    slow = isinstance(caught_exception, (ConnectTimeoutError, ReadTimeoutError)) and endpoint not in _WAITS_SAID
    _WAITS_SAID.update([endpoint] if slow else [])
    log.log(logging.WARNING if slow else logging.INFO, "the artifact store at %s did not answer (%s); trying again "
            "(%d of %d, read timeout %g s)", *args)


def _settings_refused(err: Exception) -> UserInputError:
    """One line for AWS settings boto cannot use (a profile not there, half of a key pair), naming what to set."""
    if isinstance(err, ProfileNotFound):
        import botocore.session

        profiles = ", ".join(botocore.session.Session(profile=None).available_profiles) or "none"
        return UserInputError(f"AWS_PROFILE={os.environ.get('AWS_PROFILE', err.kwargs.get('profile'))!r}: no such "
                              f"profile in ~/.aws/config or ~/.aws/credentials (profiles there: {profiles}); set "
                              "AWS_PROFILE to one of them, or unset it and set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY")
    source = {"env": "environment", "shared-credentials-file": "~/.aws/credentials", "config-file": "~/.aws/config"}
    return UserInputError(f"the AWS credentials in the {source.get(err.kwargs.get('provider'), 'environment')} lack "
                          f"{err.kwargs.get('cred_var', 'a part')}: set it too (AWS_ACCESS_KEY_ID needs "
                          "AWS_SECRET_ACCESS_KEY), or unset them and set AWS_PROFILE")


def _no_credentials(where: str, doing: str) -> StoreError:
    """No credentials anywhere boto looks: the variables or the profile to set."""
    return StoreError(f"no AWS credentials to {doing} {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                      "AWS_PROFILE to a profile in ~/.aws/credentials (`aws configure` writes one); on AWS an "
                      "instance or task role gives them")


def _client(endpoint_url: str | None):
    """One boto3 S3 client per process and endpoint (clients are thread-safe; building one costs ~40 ms)."""
    from botocore.config import Config

    from trtfarm.store.s3_listing import listing_session

    env = tuple(os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                                            "AWS_PROFILE"))
    connect, read, attempts = timeouts()
    key = (endpoint_url, *env, connect, read, attempts)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            try:
                client = listing_session().client("s3", endpoint_url=endpoint_url or None, config=Config(
                    connect_timeout=connect, read_timeout=read, max_pool_connections=32,
                    retries={"total_max_attempts": attempts, "mode": "standard"}))
            except (ProfileNotFound, PartialCredentialsError) as err:
                raise _settings_refused(err) from err
            client.meta.events.register_first("needs-retry.s3", _log_retry, unique_id="trtfarm-log-retry")
            _CLIENTS[key] = client
        return _CLIENTS[key]


_BOTO_ERRORS = (ClientError, BotoCoreError)  # an S3 answer, or no answer (connection, timeout, credentials)

# Streaming uploads in flight, per (bucket, key): their PutObject / CompleteMultipartUpload must be create-only.
# A count, not a set: two threads may upload the same key, and the first to finish must not unmark the other.
_CREATING: Counter[tuple[str, str]] = Counter()
_CREATING_LOCK = threading.Lock()


def _add_if_none_match(params: dict, **_: object) -> None:
    with _CREATING_LOCK:
        if _CREATING[(params.get("Bucket", ""), params.get("Key", ""))] and "IfMatch" not in params:
            params["IfNoneMatch"] = "*"


def _retry_conflicts(call: Callable[[], T]) -> T:
    """``call()``, again (with backoff) while S3 answers 409 ConditionalRequestConflict: racing conditional writes."""
    for attempt in range(_RETRIES):
        try:
            return call()
        except _BOTO_ERRORS as err:
            if not _is_conflict_retry(err) or attempt == _RETRIES - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


def _is_missing(err: Exception) -> bool:
    return _code(err) in {"NoSuchKey", "404", "NotFound"}


class _TranslatedBody:
    """A streaming body whose read errors (a timeout mid-stream) come out as the store's error."""

    def __init__(self, body, store: S3Store, key: str) -> None:
        self._body, self._store, self._key = body, store, key

    def read(self, n: int = -1) -> bytes:
        try:
            return self._body.read(n)
        except _BOTO_ERRORS as err:
            raise self._store._failed(err, self._key, "read") from err

    def close(self) -> None:
        self._body.close()


class S3Store(Store):
    """A store under ``s3://bucket/prefix``."""

    paged_listings = True

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 multipart_threshold: int = MULTIPART_THRESHOLD, client=None) -> None:
        from boto3.s3.transfer import TransferConfig

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.client = client or _client(endpoint_url)
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold, multipart_chunksize=16 << 20,
                                        preferred_transfer_client="classic")
        events = self.client.meta.events  # the client is shared: register once per client (unique_id), not per store
        for event in ("before-parameter-build.s3.PutObject", "before-parameter-build.s3.CompleteMultipartUpload"):
            events.register(event, _add_if_none_match, unique_id=f"trtfarm-create-only:{event}")

    def _failed(self, err: Exception, key: str, doing: str) -> StoreError:
        """The one translation of boto's errors, for every operation (a listing's prefix is named like a key).

        No answer is ``StoreUnavailable`` naming the endpoint; any other failure a ``StoreError`` naming the object.
        The name is spelled without validating it again: a listing's prefix (``plans/``) is no key, and a translation
        that raised on it would hide the endpoint's failure behind an "invalid store key".
        """
        where = f"s3://{self.bucket}/{'/'.join(p for p in (self.prefix, key) if p)}"
        if isinstance(err, NO_ANSWER):
            connect, read, attempts = timeouts()
            return StoreUnavailable(
                f"the S3 endpoint {self.client.meta.endpoint_url} did not answer ({type(err).__name__}) to {doing} "
                f"{where} after {attempts} attempt(s) (connect timeout {connect:g} s, read timeout "
                f"{read:g} s; TRTFARM_S3_CONNECT_TIMEOUT, TRTFARM_S3_READ_TIMEOUT, TRTFARM_S3_MAX_ATTEMPTS); check "
                "that the endpoint is up")
        if isinstance(err, NoCredentialsError):
            return _no_credentials(where, doing)
        return StoreError(f"{where}: {doing} failed: {err}")

    def _k(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def read_from(self, key: str, offset: int):
        """A ranged GET (``Range: bytes=offset-``); an answer without ``Content-Range`` is the whole object."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key),
                                          **({"Range": f"bytes={offset}-"} if offset else {}))
        except _BOTO_ERRORS as err:
            raise self._failed(err, key, "read") from err
        return _TranslatedBody(resp["Body"], self, key), bool(offset) and "ContentRange" in resp

    def get(self, key: str) -> Blob | None:
        """Return the object and its ETag, or None."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
            return Blob(resp["Body"].read(), resp["ETag"])  # the body streams: a timeout can come while reading it
        except _BOTO_ERRORS as err:
            if _is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def etag(self, key: str) -> str | None:
        """HEAD the object: its ETag, or None."""
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._k(key))["ETag"]
        except _BOTO_ERRORS as err:
            if _is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def size(self, key: str) -> int | None:
        """HEAD the object: its size, or None."""
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self._k(key))["ContentLength"])
        except _BOTO_ERRORS as err:
            if _is_missing(err):
                return None
            raise self._failed(err, key, "read") from err

    def _put(self, key: str, data: bytes, **cond: str) -> str:
        return _retry_conflicts(lambda: self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data,
                                                               **cond)["ETag"])

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object (``IfNoneMatch='*'``); False when it exists."""
        try:
            self._put(key, data, IfNoneMatch="*")
        except _BOTO_ERRORS as err:
            if _is_precondition_failed(err):
                return False
            raise self._failed(err, key, "write") from err
        return True

    def compare_and_swap(self, key: str, data: bytes, etag: str | None) -> str:
        """Write with ``IfMatch=etag`` (or ``IfNoneMatch='*'`` when etag is None)."""
        cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            return self._put(key, data, **cond)
        except _BOTO_ERRORS as err:
            if _is_precondition_failed(err) or (etag and _is_missing(err)):
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
            reader = _retry_conflicts(send)
        except _BOTO_ERRORS as err:
            if _is_precondition_failed(err):
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
            except _BOTO_ERRORS as err:
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
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full, **start)
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"][strip:]
                    if upto is not None and key > upto:
                        return
                    if key.startswith(prefix):
                        yield ListedObject(key, int(obj["Size"]), obj["ETag"], obj["LastModified"].timestamp())
        except _BOTO_ERRORS as err:
            raise self._failed(err, prefix, "list") from err

    def delete(self, key: str) -> None:
        """Delete the object."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._k(key))
        except _BOTO_ERRORS as err:
            raise self._failed(err, key, "delete") from err

    def url(self, key: str) -> str:
        """``s3://`` URI of the object."""
        return f"s3://{self.bucket}/{self._k(key)}"

    def share_url(self, key: str, expires_s: int = 7 * 24 * 3600) -> str | None:
        """A presigned GET URL of the object, valid ``expires_s`` seconds (signed locally: no request is made)."""
        return self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": self._k(key)},
                                                  ExpiresIn=expires_s)
