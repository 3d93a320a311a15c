"""Artifact stores: ``open_store("file:///path")``, ``open_store("./dir")`` or ``open_store("s3://bucket/prefix")``."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from trtfarm.errors import UserInputError
from trtfarm.store.base import AlreadyExists, Blob, Conflict, Store, Uploaded
from trtfarm.store.local import LocalStore

DEFAULT_STORE = "trtfarm-store"


def default_store_uri() -> str:
    """``$TRTFARM_STORE``, else ``trtfarm-store`` under the working directory."""
    return os.environ.get("TRTFARM_STORE") or DEFAULT_STORE

__all__ = ["AlreadyExists", "Blob", "Conflict", "LocalStore", "Store", "Uploaded", "open_store"]


def open_store(uri: str | None = None) -> Store:
    """Open the store named by ``uri``: ``s3://bucket/prefix``, ``file:///abs/path`` or a local path."""
    uri = uri or default_store_uri()
    try:
        parsed = urlparse(uri)
    except ValueError as err:  # brackets in a host are read as an IPv6 address
        raise UserInputError(f"store {uri!r}: not a valid URI ({err}); write s3://BUCKET/PREFIX, file:///abs/path "
                             "or a path") from err
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise UserInputError(f"store {uri!r}: no bucket; write s3://BUCKET/PREFIX")
        from trtfarm.store.s3 import S3Store

        return S3Store(parsed.netloc, unquote(parsed.path).lstrip("/"))
    if parsed.scheme == "file":
        return LocalStore(Path(unquote(parsed.path)))
    if parsed.scheme in ("", ) or len(parsed.scheme) == 1:  # plain path (or a Windows drive letter)
        return LocalStore(Path(uri))
    raise UserInputError(f"store {uri!r}: unsupported scheme {parsed.scheme!r}; use s3://, file:// or a path")
