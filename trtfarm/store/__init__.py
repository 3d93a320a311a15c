"""Artifact stores: ``open_store("file:///path")``, ``open_store("./dir")`` or ``open_store("s3://bucket/prefix")``."""

from __future__ import annotations

import os

from trtfarm.store.base import AlreadyExists, Blob, Conflict, Store, Uploaded
from trtfarm.store.local import LocalStore
from trtfarm.store.uri import StoreURI, is_store_uri, is_uri, uri_parts

DEFAULT_STORE = "trtfarm-store"


def default_store_uri() -> str:
    """``$TRTFARM_STORE``, else ``trtfarm-store`` under the working directory."""
    return os.environ.get("TRTFARM_STORE") or DEFAULT_STORE

__all__ = ["AlreadyExists", "Blob", "Conflict", "LocalStore", "Store", "StoreURI", "Uploaded", "is_store_uri", "is_uri",
           "open_store", "uri_parts"]


def open_store(uri: str | None = None) -> Store:
    """Open the store named by ``uri``: ``s3://bucket/prefix``, ``file:///abs/path`` or a local path."""
    where = StoreURI.parse(uri or default_store_uri())
    if where.scheme == "s3":
        from trtfarm.store.s3 import S3Store

        return S3Store(where.bucket, where.prefix)
    return LocalStore(where.path)
