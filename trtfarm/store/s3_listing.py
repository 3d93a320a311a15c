"""S3 listings read at the speed of the wire: the botocore session the S3 store's client is made from.

botocore parses every response by walking its model, field by field, and every timestamp with dateutil: a page of
1,000 keys of a ListObjectsV2 cost ~85 ms of CPU (~60 ms of it in dateutil), so a view of a store of 64,000 objects
spent 5.5-6 s of CPU reading its listings. This session's parsers read a ListObjectsV2 page in one pass over its
XML (a page as S3 writes it by one regular expression over all its objects, ~2 ms a page; another page object by
object, each one's key, size, ETag, time and storage class by a regular expression; the page's own fields), and
timestamps with the standard library (ISO 8601 in bodies, RFC 1123 in headers; anything else through botocore's own
parser). Every other response is botocore's parse, unchanged; errors, retries and signing are botocore's.
"""

from __future__ import annotations

import html
import re
from datetime import datetime
from email.utils import parsedate_to_datetime
from xml.etree import ElementTree

from botocore.parsers import PROTOCOL_PARSERS, ResponseParserFactory, RestXMLParser
from botocore.utils import parse_timestamp

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_INTEGERS = {"MaxKeys", "KeyCount", "Size"}
OBJECT_FIELDS = {"Key", "LastModified", "ETag", "Size", "StorageClass"}  # an object's, as a listing reads them
_CONTENTS = re.compile(rb"<Contents>(.*?)</Contents>", re.S)
_LEAF = re.compile(rb"<(\w+)>([^<]*)</\1>")


def fast_timestamp(value: str) -> datetime:
    """A timestamp of S3's: ISO 8601 (bodies) or RFC 1123 (headers), timezone-aware; else botocore's parse."""
    try:
        found = datetime.fromisoformat(value)
        if found.tzinfo is not None:
            return found
    except (TypeError, ValueError):
        pass
    try:
        found = parsedate_to_datetime(value)
        if found.tzinfo is not None:
            return found
    except (TypeError, ValueError, IndexError):
        pass
    return parse_timestamp(value)


def _text(text: str, name: str) -> object:
    """A leaf's value as botocore types it for a ListObjectsV2 page."""
    if name in _INTEGERS:
        return int(text)
    if name == "IsTruncated":
        return text == "true"
    if name == "LastModified":
        return fast_timestamp(text)
    return text


def _leaf(value: bytes) -> str:
    """A leaf element's text: its bytes decoded, its character references replaced (``&quot;``, ``&#34;``)."""
    text = value.decode()
    return html.unescape(text) if "&" in text else text


# An object's element as S3 writes it: its fields in S3's order, each a leaf (checksums and the owner optional)
_CANONICAL = re.compile(
    rb"<Contents><Key>([^<]*)</Key><LastModified>([^<]*)</LastModified><ETag>([^<]*)</ETag>"
    rb"(?:<Checksum\w+>[^<]*</Checksum\w+>)*<Size>(\d+)</Size>"
    rb"(?:<Owner>(?:<ID>[^<]*</ID>)?(?:<DisplayName>[^<]*</DisplayName>)?</Owner>)?"
    rb"<StorageClass>([^<]*)</StorageClass></Contents>")


def listing_page(body: bytes) -> dict:
    """A ListObjectsV2 page's XML as botocore's parse gives it: the page's fields and each object's.

    A page whose objects are written as S3 writes them (``_CANONICAL``, one after the other) is read by one
    regular expression over the page, its own fields from what is around them (~2 ms for 1,000 objects). Any other
    page's objects are read from each ``<Contents>`` element's flat leaves (~9 ms); of each object's fields, those a
    listing reads (``OBJECT_FIELDS``). The page's own fields, and a page with markup a flat reading could misread
    (CDATA, comments, an object whose key it did not find), through the tree.
    """
    if b"<![CDATA[" in body or b"<!--" in body:
        return _page_tree(ElementTree.fromstring(body))
    fast = _canonical_page(body)
    if fast is not None:
        return fast
    contents = [{name: _text(_leaf(value), name) for tag, value in _LEAF.findall(m.group(1))
                 if (name := tag.decode()) in OBJECT_FIELDS} for m in _CONTENTS.finditer(body)]
    if not all("Key" in obj for obj in contents):
        return _page_tree(ElementTree.fromstring(body))
    out = _page_tree(ElementTree.fromstring(_CONTENTS.sub(b"", body)))
    if contents:
        out["Contents"] = contents
    return out


def _canonical_page(body: bytes) -> dict | None:
    """The page read by ``_CANONICAL`` where every object matches it, side by side; None for any other page."""
    found = list(_CANONICAL.finditer(body))
    if not found or len(found) != body.count(b"<Contents>") or any(
            a.end() != b.start() for a, b in zip(found, found[1:], strict=False)):
        return None
    out = _page_tree(ElementTree.fromstring(body[:found[0].start()] + body[found[-1].end():]))
    out["Contents"] = [{"Key": _leaf(key), "LastModified": fast_timestamp(modified.decode()), "ETag": _leaf(etag),
                        "Size": int(size), "StorageClass": _leaf(storage)}
                       for key, modified, etag, size, storage in (m.groups() for m in found)]
    return out


def _page_tree(root: ElementTree.Element) -> dict:
    """A page's fields from its element tree (its objects' too, when they are still in it)."""
    out: dict = {}
    contents, prefixes = [], []
    for node in root:
        name = node.tag.removeprefix(_NS)
        if name == "Contents":
            contents.append({f: _text(leaf.text or "", f) for leaf in node
                             if (f := leaf.tag.removeprefix(_NS)) in OBJECT_FIELDS})
        elif name == "CommonPrefixes":
            prefixes.extend({"Prefix": p.text or ""} for p in node if p.tag.removeprefix(_NS) == "Prefix")
        elif not len(node):
            out[name] = _text(node.text or "", name)
    if contents:
        out["Contents"] = contents
    if prefixes:
        out["CommonPrefixes"] = prefixes
    return out


class _ListingParser(RestXMLParser):
    """botocore's REST-XML parser; a ListObjectsV2 page's body read by ``listing_page``."""

    def _parse_payload(self, response, shape, member_shapes, final_parsed):
        if shape is not None and shape.name == "ListObjectsV2Output" and response.get("body"):
            final_parsed.update(listing_page(response["body"]))
            return
        super()._parse_payload(response, shape, member_shapes, final_parsed)


class _Parsers(ResponseParserFactory):
    """botocore's parsers with ``fast_timestamp``, and ``_ListingParser`` for REST-XML (S3)."""

    def create_parser(self, protocol_name):
        cls = _ListingParser if protocol_name == "rest-xml" else PROTOCOL_PARSERS[protocol_name]
        return cls(**self._defaults)


def listing_session():
    """A boto3 session whose clients parse as this module says (the store's, and no other client of the process)."""
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    parsers = _Parsers()
    parsers.set_parser_defaults(timestamp_parser=fast_timestamp)
    core.register_component("response_parser_factory", parsers)
    return boto3.Session(botocore_session=core)
