"""Where a store, or an object or export in one, lives: a URI (``s3://``, ``file://``) or a local path.

Decided once, here: every place that asks "is this a URI or a path?" asks ``StoreURI`` (or ``is_uri``), so a
``file:///abs`` store, a relative path and an ``s3://`` prefix are told apart the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from trtfarm.errors import UserInputError

SCHEMES = ("s3", "file")  # the stores trtfarm opens (store/__init__.py maps each to its backend)


def is_uri(text: str) -> bool:
    """True when ``text`` names a location by URI (``scheme://...``), False for a local path."""
    return "://" in text


def uri_parts(text: str) -> tuple[str, str, str]:
    """``(scheme, host, path)`` as written, not percent-decoded: ``s3://b/p%20q`` -> ``("s3", "b", "/p%20q")``.

    A plain path has scheme ``""``. Raises ``ValueError`` for text no URI parser reads (``s3://[bad``).
    """
    parsed = urlparse(text)
    return parsed.scheme, parsed.netloc, parsed.path


def is_store_uri(text: str) -> bool:
    """True for a URI of a store trtfarm opens (``s3://``, ``file://``); False for a path or another scheme."""
    return uri_parts(text)[0] in SCHEMES


@dataclass(frozen=True)
class StoreURI:
    """A store location, parsed once: ``scheme`` is ``s3``, ``file`` or ``""`` (a plain local path).

    ``bucket`` and ``prefix`` are an ``s3://`` location's; ``path`` is a local one's (``file://`` or a plain path).
    """

    text: str
    scheme: str
    bucket: str = ""
    prefix: str = ""
    path: Path | None = None

    @property
    def local(self) -> bool:
        """True for a folder on this machine (``file://`` or a plain path)."""
        return self.path is not None

    @classmethod
    def parse(cls, text: str) -> StoreURI:
        """``s3://bucket/prefix``, ``file:///abs/path`` or a path; one line naming what is wrong otherwise."""
        try:
            parsed = urlparse(text)
        except ValueError as err:  # brackets in a host are read as an IPv6 address
            raise UserInputError(f"store {text!r}: not a valid URI ({err}); write s3://BUCKET/PREFIX, "
                                 "file:///abs/path or a path") from err
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise UserInputError(f"store {text!r}: no bucket; write s3://BUCKET/PREFIX")
            return cls(text, "s3", bucket=parsed.netloc, prefix=unquote(parsed.path).lstrip("/"))
        if parsed.scheme == "file":
            return cls(text, "file", path=Path(unquote(parsed.path)))
        if not parsed.scheme or len(parsed.scheme) == 1:  # a plain path (or a Windows drive letter)
            return cls(text, "", path=Path(text))
        raise UserInputError(f"store {text!r}: unsupported scheme {parsed.scheme!r}; use s3://, file:// or a path")
