"""moto's S3 server with its object writes serialised: the S3 test double for anything that races conditional writes.

Why: moto does not make a conditional write atomic. ``put_object`` checks ``If-Match`` / ``If-None-Match``
(moto/s3/responses.py) and stores the object later (moto/s3/models.py) with no lock over the two, and the server
runs each request in its own thread, so two PUTs carrying the same ETag can both pass the check and both write: a
compare-and-swap loop then loses an update (16 writers x 10 timing-cache merges lost 1 of 160 entries in 1-4 runs out
of 10; raw boto3 the same). S3 itself serialises conditional writes. A lock per object around every write (PutObject,
CopyObject, CompleteMultipartUpload, DeleteObject) gives moto S3's behaviour; reads and the parts of a multipart
upload still run in parallel.

In a test process: ``SerialisedMotoServer("127.0.0.1", 0).start()`` (as ``moto.server.ThreadedMotoServer``).
As a process: ``python -m tests.moto_serialised -H 127.0.0.1 -p PORT`` (as ``moto_server``), from the repository root.
"""

from __future__ import annotations

import argparse
import threading
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server, run_simple


def is_object_write(environ: dict) -> bool:
    """PUT (not an UploadPart), DELETE, or POST completing a multipart upload: what must not interleave."""
    method, query = environ.get("REQUEST_METHOD"), parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    if method == "PUT":
        return "partNumber" not in query
    if method == "POST":
        return "uploadId" in query
    return method == "DELETE"


class SerialisedWrites:
    """WSGI middleware: one write at a time per object, check and store together (moto answers inside the call).

    The lock is per object (host + path), not global: moto delivers bucket notifications inside the write (S3 ->
    SNS -> an HTTP subscriber), and a subscriber that writes another object in the same store (the webhook's claim)
    must not wait for the write that notified it.
    """

    def __init__(self, app) -> None:
        self.app = app
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.guard = threading.Lock()

    def lock_for(self, environ: dict) -> threading.Lock:
        """The lock of the object this request writes."""
        key = (environ.get("HTTP_HOST", ""), environ.get("PATH_INFO", ""))
        with self.guard:
            return self.locks.setdefault(key, threading.Lock())

    def __call__(self, environ, start_response):
        if not is_object_write(environ):
            return self.app(environ, start_response)
        with self.lock_for(environ):
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]  # produce the whole response while the lock is held
            finally:
                getattr(result, "close", lambda: None)()


def serialised_app() -> SerialisedWrites:
    """moto's server application (every service, dispatched by host) with object writes serialised."""
    return SerialisedWrites(DomainDispatcherApplication(create_backend_app))


class SerialisedMotoServer:
    """moto's server in a thread of this process, started like ``ThreadedMotoServer`` (bind 127.0.0.1)."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0) -> None:
        self._server = make_server(ip_address, port, serialised_app(), threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve in a background thread (the socket is already bound, so requests can come at once)."""
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        """Where it listens (port 0 picks a free one)."""
        host, port = self._server.server_address[:2]
        return str(host), port

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, the endpoint to give boto3."""
        return "http://{}:{}".format(*self.get_host_and_port())

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()


def main(argv: list[str] | None = None) -> None:
    """``moto_server`` with object writes serialised: ``-H HOST -p PORT``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, default=5000)
    args = ap.parse_args(argv)
    run_simple(args.host, args.port, serialised_app(), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
