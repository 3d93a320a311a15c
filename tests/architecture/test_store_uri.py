"""A URI is told from a path in one place: ``trtfarm.store.uri`` (``StoreURI``, ``is_uri``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trtfarm.errors import UserInputError
from trtfarm.store.uri import StoreURI, is_uri

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "trtfarm" / "store" / "uri.py"


def _scheme_tests(path: Path) -> list[int]:
    """Lines of ``path`` that test a string for ``"://"`` (``"://" in x`` or ``not in``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value == "://" \
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            found.append(node.lineno)
    return found


def test_only_the_store_uri_type_tells_a_uri_from_a_path():
    offenders = [f"{p.relative_to(REPO)}:{line}" for pkg in ("trtfarm", "flows", "tasks")
                 for p in sorted((REPO / pkg).rglob("*.py")) if p != HOME for line in _scheme_tests(p)]
    assert offenders == [], f"ask trtfarm.store.uri (StoreURI / is_uri) instead: {offenders}"
    assert _scheme_tests(HOME), "the type itself decides it"


@pytest.mark.parametrize(("text", "scheme", "local"), [
    ("s3://bucket/some/prefix", "s3", False), ("file:///abs/store", "file", True), ("./trtfarm-store", "", True),
    ("relative/dir", "", True), ("/abs/dir", "", True)])
def test_parse_decides_the_kind_once(text, scheme, local):
    where = StoreURI.parse(text)
    assert (where.scheme, where.local, is_uri(text)) == (scheme, local, scheme != "")


def test_parse_names_what_is_wrong():
    assert StoreURI.parse("s3://b/p/q").prefix == "p/q" and StoreURI.parse("s3://b").bucket == "b"
    assert StoreURI.parse("file:///a%20b/c").path == Path("/a b/c")
    for bad, why in [("s3:///prefix", "no bucket"), ("ftp://host/x", "unsupported scheme"),
                     ("s3://[bad/x", "not a valid URI")]:
        with pytest.raises(UserInputError, match=why):
            StoreURI.parse(bad)
