"""moto's S3 server on 127.0.0.1 for benchmarks, with the AWS settings pointed at it (as the tests do).

It is the tests' serialised moto (tests/moto_serialised.py): moto checks If-Match / If-None-Match and writes later with
no lock, so without it concurrent compare-and-swap merges lose entries that S3 would keep.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def start_moto_bucket(bucket: str):
    """Start the server, create ``bucket``; returns (server, the AWS environment variables set)."""
    import boto3

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.moto_serialised import SerialisedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's access log
    server = SerialisedMotoServer("127.0.0.1", 0)
    server.start()
    host, port = server.get_host_and_port()
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    os.environ.update(aws)
    boto3.client("s3").create_bucket(Bucket=bucket)
    return server, aws
