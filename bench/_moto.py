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
    (tests/hosts.py). ``fill``: ``(bucket, file of keys)``: serve only once that bucket holds those keys, written
    into moto's backend in the server's process before it listens (``python -m bench._moto``), ``start_s`` allowed.
    """

    def __init__(self, host: str = "127.0.0.1", fill: tuple[str, Path] | None = None, start_s: float = 60) -> None:
        self.host = host
        with socket.socket() as s:
            s.bind((host, 0))
            self.port = s.getsockname()[1]
        module = ["bench._moto", "--fill", fill[0], str(fill[1])] if fill else ["tests.moto_serialised"]
        self.proc = subprocess.Popen([sys.executable, "-m", *module, "-H", host, "-p", str(self.port)], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto's server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError(f"moto's server did not start within {start_s:.0f} s")

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


def main() -> None:
    """``python -m bench._moto --fill BUCKET KEYS -H HOST -p PORT``: tests.moto_serialised, with a bucket filled.

    Each key of the file (one a line) becomes an object of 16 bytes, put straight into moto's backend in this process
    (``s3_backends[...].put_object``): 64,000 objects in seconds, where as many PUTs over HTTP take about 5 minutes.
    Nothing else differs from the server the other benches start: it listens only once the bucket is full.
    """
    import argparse

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    from tests import moto_serialised

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--fill", nargs=2, metavar=("BUCKET", "KEYS"), required=True)
    args, rest = parser.parse_known_args()
    bucket, keys = args.fill[0], Path(args.fill[1]).read_text().split()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket(bucket, "us-east-1")
    for key in keys:
        backend.put_object(bucket, key, b"x" * 16)
    moto_serialised.main(rest)


if __name__ == "__main__":
    main()
