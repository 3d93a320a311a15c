"""moto's S3 server on 127.0.0.1 for benchmarks, with the AWS settings pointed at it (as the tests do).

It is the tests' serialised moto (tests/moto_serialised.py): moto checks If-Match / If-None-Match and writes later with
no lock, so without it concurrent compare-and-swap merges lose entries that S3 would keep. It runs as its own process,
as a remote S3 would: in the benchmark's process its request handling would compete with trtfarm for the
interpreter lock and be counted as trtfarm's time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class MotoProcess:
    """``python -m tests.moto_serialised`` on a free loopback port of ``host``; ``stop()`` ends it.

    ``host``: another loopback-range address where worker hosts in their own network namespaces must reach it
    (tests/hosts.py).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        with socket.socket() as s:
            s.bind((host, 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.moto_serialised", "-H", host, "-p",
                                      str(self.port)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto's server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto's server did not start within 60 s")

    def get_host_and_port(self) -> tuple[str, int]:
        """Where it listens."""
        return self.host, self.port

    def stop(self) -> None:
        """End the server process."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_moto_bucket(bucket: str):
    """Start the server, create ``bucket``; returns (server, the AWS environment variables set)."""
    import boto3

    server = MotoProcess()
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.port}"}
    os.environ.update(aws)
    boto3.client("s3").create_bucket(Bucket=bucket)
    return server, aws
