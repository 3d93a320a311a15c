"""moto's S3 server on 127.0.0.1 for benchmarks, with the AWS settings pointed at it (as the tests do)."""

from __future__ import annotations

import logging
import os


def start_moto_bucket(bucket: str):
    """Start the server, create ``bucket``; returns (server, the AWS environment variables set)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's access log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    os.environ.update(aws)
    boto3.client("s3").create_bucket(Bucket=bucket)
    return server, aws
