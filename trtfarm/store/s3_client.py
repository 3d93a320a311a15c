"""The S3 store's boto3 client and what becomes of boto's failures: one client per process and endpoint.

The endpoint comes from boto3's own settings (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, profiles) or the
``endpoint_url`` argument. An endpoint that stops answering costs at most its timeouts times its attempts, then one
``StoreUnavailable`` line naming the endpoint, the last error and the tries: ``TRTFARM_S3_CONNECT_TIMEOUT`` (seconds,
default 5), ``TRTFARM_S3_READ_TIMEOUT`` (default 20) and ``TRTFARM_S3_MAX_ATTEMPTS`` (tries per request, first
included, default 3). Each retry is logged (``trtfarm.store``) at INFO, which ``-v`` shows; a timeout's wait, the
first per endpoint, also at WARNING (a silent wait looks hung). Missing or broken credentials name what to set.
Racing conditional writes (409 ``ConditionalRequestConflict``) are tried again with backoff. boto's errors are
translated here, once, into the store's kinds (``translated``); ``s3.py`` only says which object and what it did.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
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

from trtfarm.errors import StoreError, StoreUnavailable, UserInputError

T = TypeVar("T")
_RETRIES = 5
CLIENTS: dict[tuple, object] = {}  # one client per endpoint and settings, for the process
_CLIENTS_LOCK = threading.Lock()
log = logging.getLogger("trtfarm.store")
NO_ANSWER = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)
BOTO_ERRORS = (ClientError, BotoCoreError)  # an S3 answer, or no answer (connection, timeout, credentials)
TIMEOUTS = {"TRTFARM_S3_CONNECT_TIMEOUT": 5.0, "TRTFARM_S3_READ_TIMEOUT": 20.0, "TRTFARM_S3_MAX_ATTEMPTS": 3}


def error_code(err: Exception) -> str:
    """The S3 error code of a boto error (``NoSuchKey``), else its HTTP status (``404``), else ``""``."""
    resp = getattr(err, "response", None) or {}
    return str(resp.get("Error", {}).get("Code", "")) or str(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def is_precondition_failed(err: Exception) -> bool:
    """True when a conditional write lost: the object exists (``IfNoneMatch``) or changed (``IfMatch``)."""
    return error_code(err) in {"PreconditionFailed", "412"}


def is_missing(err: Exception) -> bool:
    """True when the object is not there."""
    return error_code(err) in {"NoSuchKey", "404", "NotFound"}


def _is_conflict_retry(err: Exception) -> bool:
    return error_code(err) in {"ConditionalRequestConflict", "409"}


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


def client_for(endpoint_url: str | None):
    """One boto3 S3 client per process and endpoint (clients are thread-safe; building one costs ~40 ms)."""
    from botocore.config import Config

    from trtfarm.store.s3_listing import listing_session

    env = tuple(os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                                            "AWS_PROFILE"))
    connect, read, attempts = timeouts()
    key = (endpoint_url, *env, connect, read, attempts)
    with _CLIENTS_LOCK:
        if key not in CLIENTS:
            try:
                made = listing_session().client("s3", endpoint_url=endpoint_url or None, config=Config(
                    connect_timeout=connect, read_timeout=read, max_pool_connections=32,
                    retries={"total_max_attempts": attempts, "mode": "standard"}))
            except (ProfileNotFound, PartialCredentialsError) as err:
                raise _settings_refused(err) from err
            made.meta.events.register_first("needs-retry.s3", _log_retry, unique_id="trtfarm-log-retry")
            CLIENTS[key] = made
        return CLIENTS[key]


def retry_conflicts(call: Callable[[], T]) -> T:
    """``call()``, again (with backoff) while S3 answers 409 ConditionalRequestConflict: racing conditional writes."""
    for attempt in range(_RETRIES):
        try:
            return call()
        except BOTO_ERRORS as err:
            if not _is_conflict_retry(err) or attempt == _RETRIES - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


def translated(err: Exception, endpoint: str, where: str, doing: str) -> StoreError:
    """The one translation of boto's errors, for every operation of the store at ``endpoint`` on ``where``.

    No answer is ``StoreUnavailable`` naming the endpoint; no credentials name what to set; any other failure is a
    ``StoreError`` naming the object.
    """
    if isinstance(err, NO_ANSWER):
        connect, read, attempts = timeouts()
        return StoreUnavailable(
            f"the S3 endpoint {endpoint} did not answer ({type(err).__name__}) to {doing} "
            f"{where} after {attempts} attempt(s) (connect timeout {connect:g} s, read timeout "
            f"{read:g} s; TRTFARM_S3_CONNECT_TIMEOUT, TRTFARM_S3_READ_TIMEOUT, TRTFARM_S3_MAX_ATTEMPTS); check "
            "that the endpoint is up")
    if isinstance(err, NoCredentialsError):
        return _no_credentials(where, doing)
    return StoreError(f"{where}: {doing} failed: {err}")
