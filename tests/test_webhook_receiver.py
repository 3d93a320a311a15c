"""The receiver for real (`trtfarm webhook serve` on 127.0.0.1): bad model URIs get a 4xx or a 502 with one line of
reason, never a 500, and a refused post creates nothing on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trtfarm.triggers.webhook import sign

from .conftest import REPO

SECRET = "s3cret"
TOPIC = "arn:aws:sns:us-east-1:123456789012:model-exports"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket closes


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    """The receiver with roots <tmp>/exports and s3://unreachable-bucket/exports; Prefect, S3 and SNS unreachable."""
    tmp = tmp_path_factory.mktemp("webhook")
    (tmp / "exports" / "encoder").mkdir(parents=True)
    (tmp / "exports" / "encoder" / "model.onnx").write_bytes(b"onnx")
    (tmp / "exports" / "passwd").write_text("root:x:0:0\n")
    port, dead = _closed_port(), f"http://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "TRTFARM_WEBHOOK_SECRET": SECRET, "PREFECT_API_URL": f"{dead}/api",
           "AWS_ENDPOINT_URL": dead, "AWS_ENDPOINT_URL_SNS": dead, "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1"}
    log = open(tmp / "receiver.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "trtfarm", "webhook", "serve", "--port", str(port), "--topic", TOPIC,
                             "--allow-root", str(tmp / "exports"), "--allow-root", "s3://unreachable-bucket/exports",
                             "--store", str(tmp / "store")], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            httpx.get(f"{url}/healthz", timeout=2)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "receiver.log").read_text()
            time.sleep(0.3)
    yield url, tmp
    proc.terminate()
    proc.wait(30)
    log.close()
    assert "Traceback" not in (tmp / "receiver.log").read_text()


def _hook(url: str, model_uri: str) -> httpx.Response:
    body = json.dumps({"model_uri": model_uri}).encode()
    ts = str(int(time.time()))
    return httpx.post(f"{url}/hook", content=body, timeout=60,
                      headers={"X-Trtfarm-Timestamp": ts, "X-Trtfarm-Signature": sign(SECRET, ts, body)})


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.integration
@pytest.mark.parametrize("model_uri,status,words", [
    ("file://{tmp}/missing/a/b/c/", 403, "outside the folders this receiver accepts"),
    ("file://{tmp}/exports/x/%2e%2e/%2e%2e/escape/a/", 400, "'..' segments"),
    ("file://{tmp}/exports/../escape/", 400, "'..' segments"),
    ("file:///etc/passwd", 403, "outside the folders"),
    ("file://{tmp}/exports/passwd", 400, "does not exist"),             # a file where the folder would be
    ("file://{tmp}/exports/missing/a/b/", 400, "model.onnx does not exist"),
    ("s3://unreachable-bucket/elsewhere/encoder/", 403, "--allow-root"),
    ("s3://unreachable-bucket/exports/encoder/", 502, "did not answer"),  # the store's endpoint is down
    ("file://{tmp}/exports/encoder/", 502, "could not post the event to Prefect"),  # accepted; Prefect is down
    ("file://{tmp}/exports/" + "a" * 300 + "/", 400, "longer than 255 bytes"),  # issue 23: was a 500
    ("s3://unreachable-bucket/exports/" + "b" * 300 + "/", 400, "longer than 255 bytes"),
])
def test_a_bad_model_uri_is_refused_in_one_line_and_creates_nothing(receiver, model_uri, status, words):
    url, tmp = receiver
    before = _files(tmp)
    resp = _hook(url, model_uri.format(tmp=tmp))
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert words in error and "\n" not in error and "Traceback" not in resp.text
    new = _files(tmp) - before - {"receiver.log"}
    if "Prefect" in words:  # accepted: the claim was written to the store, then given back for the sender's retry
        assert all((tmp / p).is_dir() for p in new), new
    else:
        assert not new  # refused: nothing was opened for writing, no folder appeared


DEEP = b'{"model_uri": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.integration
def test_deeply_nested_json_is_400_on_hook_signed_and_on_sns_before_any_signature_check(receiver):
    url, _ = receiver
    ts = str(int(time.time()))
    for resp in (httpx.post(f"{url}/hook", content=DEEP, timeout=60, headers={
                     "X-Trtfarm-Timestamp": ts, "X-Trtfarm-Signature": sign(SECRET, ts, DEEP)}),
                 httpx.post(f"{url}/sns", content=DEEP, timeout=60)):
        assert resp.status_code == 400, resp.text
        assert "nested too deeply" in resp.json()["error"]


@pytest.mark.integration
def test_an_sns_message_whose_signing_certificate_cannot_be_fetched_is_502(receiver):
    url, _ = receiver
    msg = {"Type": "Notification", "MessageId": "m1", "TopicArn": TOPIC, "Message": "{}", "Signature": "AAAA",
           "Timestamp": "2026-11-29T00:00:00.000Z", "SignatureVersion": "1",
           "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem"}
    resp = httpx.post(f"{url}/sns", content=json.dumps(msg).encode(), timeout=60)
    assert resp.status_code == 502, resp.text
    assert "SNS did not answer" in resp.json()["error"] and "\n" not in resp.json()["error"]
