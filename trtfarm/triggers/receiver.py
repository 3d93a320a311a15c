"""``trtfarm webhook serve``: the HTTP receiver (FastAPI on uvicorn) around ``trtfarm.triggers.webhook``.

``POST /sns`` takes SNS deliveries (S3 event notifications), ``POST /hook`` the HMAC-signed generic JSON, ``GET
/healthz`` answers health checks. Each new export becomes one ``trtfarm.model.exported`` event, posted to the Prefect
server's ``/api/events``; a deployment trigger in prefect.yaml turns it into a build-matrix run.

Every refusal is a 4xx with one line of reason (``{"error": ...}``), or 502 when a service it needs (the store, the
SNS certificate host, Prefect) did not answer; only a bug in trtfarm answers 500.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse, urlunparse

import httpx
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from trtfarm.errors import TrtfarmError, UserInputError
from trtfarm.publishing.registry import ONNX_NAME
from trtfarm.store import open_store
from trtfarm.triggers.webhook import (
    SNS_CERT_HOST,
    Export,
    Rejected,
    check_signature,
    check_sns_signature,
    claim,
    export_from_json,
    exports_from_s3_event,
    parse_sns,
    release_claim,
    root_from_config,
)


@dataclass
class WebhookConfig:
    """What the receiver accepts and where it sends events."""

    store_uri: str
    prefect_api_url: str
    secret: str | None = None
    topics: set[str] = field(default_factory=set)
    replay_window_s: int = 300
    max_body: int = 1 << 20
    verify_sns: bool = True
    allow_roots: list[str] = field(default_factory=list)  # where exports may come from; empty: the store only


def _sns_get(url: str, refused: int = 400) -> httpx.Response:
    """GET an SNS URL (signing certificate, SubscribeURL); SNS hosts only.

    With ``AWS_ENDPOINT_URL_SNS`` or ``AWS_ENDPOINT_URL`` set (as boto3 honours them), the request goes there,
    with the SNS host kept in the Host header. SNS answering 4xx is ``Rejected(refused)``; SNS not answering (or
    5xx) is ``Rejected(502)``.
    """
    parsed = urlparse(url)
    if not SNS_CERT_HOST.fullmatch(parsed.hostname or ""):
        raise Rejected(401, f"{url!r} is not an SNS URL")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_SNS") or os.environ.get("AWS_ENDPOINT_URL")
    target, headers = url, {}
    if endpoint:
        e = urlparse(endpoint)
        target, headers = urlunparse(parsed._replace(scheme=e.scheme, netloc=e.netloc)), {"Host": parsed.netloc}
    try:
        resp = httpx.get(target, headers=headers, timeout=10)
    except httpx.HTTPError as err:
        raise Rejected(502, f"could not fetch {url}: {type(err).__name__}: {err}; SNS did not answer") from err
    if resp.status_code >= 400:
        status = refused if resp.status_code < 500 else 502
        raise Rejected(status, f"could not fetch {url}: SNS answered HTTP {resp.status_code}")
    return resp


@functools.lru_cache(maxsize=32)
def _fetch_cert(url: str) -> bytes:
    return _sns_get(url, refused=401).content  # a certificate SNS does not have: the message is not genuine


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise Rejected(413, f"body of {declared} bytes is over the {limit}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Rejected(413, f"body over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _folder_etag(uri: str) -> str | None:
    return open_store(uri).etag(ONNX_NAME)


async def _emit(cfg: WebhookConfig, exports: list[Export], source: str) -> JSONResponse:
    """Claim each export, post its event; a failed post gives the claim back (the sender retries)."""
    store = open_store(cfg.store_uri)
    triggered, duplicates = [], []
    for export in exports:
        try:
            claimed = await run_in_threadpool(claim, store, export, source)
        except TrtfarmError as err:  # StoreError: the store did not take the claim; the sender retries
            raise Rejected(502, f"could not record the export in the store {cfg.store_uri}: {_line(err)}") from err
        if not claimed:
            duplicates.append(export.uri)
            continue
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                resp = await client.post(f"{cfg.prefect_api_url.rstrip('/')}/events", json=[export.event(source)])
                resp.raise_for_status()
        except httpx.HTTPError as err:
            await run_in_threadpool(release_claim, store, export)
            return JSONResponse({"error": f"could not post the event to Prefect: {err}"}, status_code=502)
        triggered.append(export.uri)
    return JSONResponse({"triggered": triggered, "duplicates": duplicates}, status_code=202 if triggered else 200)


def _line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def create_app(cfg: WebhookConfig) -> FastAPI:
    """The receiver: ``/sns``, ``/hook`` and ``/healthz``. Raises ``UserInputError`` for a malformed root."""
    try:
        roots = [root_from_config(r) for r in cfg.allow_roots or [cfg.store_uri]]
    except Rejected as err:
        raise UserInputError(str(err)) from err
    app = FastAPI(title="trtfarm webhook", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(Rejected)
    async def rejected(_: Request, exc: Rejected) -> JSONResponse:
        return JSONResponse({"error": _line(exc)}, status_code=exc.status)

    @app.exception_handler(TrtfarmError)
    async def refused(_: Request, exc: TrtfarmError) -> JSONResponse:  # user input: 400; a service failed: 502
        return JSONResponse({"error": _line(exc)}, status_code=400 if isinstance(exc, UserInputError) else 502)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"ok": True}

    @app.post("/hook")
    async def hook(request: Request) -> JSONResponse:
        if not cfg.secret:
            raise Rejected(503, "generic hooks are off: start the receiver with a secret (TRTFARM_WEBHOOK_SECRET)")
        body = await _body(request, cfg.max_body)
        check_signature(cfg.secret, request.headers.get("x-trtfarm-timestamp"),
                        request.headers.get("x-trtfarm-signature"), body, time.time(), cfg.replay_window_s)
        export = await run_in_threadpool(export_from_json, body, _folder_etag, roots)
        return await _emit(cfg, [export], "hook")

    @app.post("/sns")
    async def sns(request: Request) -> JSONResponse:
        body = await _body(request, cfg.max_body)
        msg = parse_sns(body, cfg.topics)
        if cfg.verify_sns:
            await run_in_threadpool(check_sns_signature, msg, _fetch_cert)
        if msg["Type"] == "SubscriptionConfirmation":
            await run_in_threadpool(_sns_get, msg["SubscribeURL"], 400)
            return JSONResponse({"confirmed": msg["TopicArn"]})
        if msg["Type"] != "Notification":
            return JSONResponse({"ignored": msg["Type"]})
        exports = exports_from_s3_event(msg.get("Message", ""), roots)
        return await _emit(cfg, exports, f"sns:{msg.get('MessageId')}")

    return app


def serve(cfg: WebhookConfig, host: str, port: int) -> None:
    """Run the receiver until interrupted."""
    import uvicorn

    uvicorn.run(create_app(cfg), host=host, port=port, log_level="info", access_log=True)
