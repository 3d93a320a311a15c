"""A URI is told from a path in one place: ``trtfarm.store.uri`` (``StoreURI``, ``is_uri``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trtfarm.errors import UserInputError
from trtfarm.store.uri import StoreURI, is_store_uri, is_uri, uri_parts

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


# URL parsing that is not about a store: (file, function) -> why it parses a URL itself
NOT_A_STORE = {
    ("trtfarm/triggers/webhook.py", "check_sns_signature"): "SNS's https certificate URL: its host is checked",
    ("trtfarm/triggers/receiver.py", "_sns_get"): "an https SNS URL redirected to AWS_ENDPOINT_URL's host",
}
PARSERS = {"urlparse", "urlsplit"}


def _url_parses(path: Path) -> list[tuple[int, str]]:
    """``(line, enclosing function)`` of each use of ``urlparse``/``urlsplit`` in ``path`` (imports aside)."""
    tree, found = ast.parse(path.read_text()), []
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               for a in n.names if a.name in PARSERS}

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if (isinstance(child, ast.Name) and child.id in aliases) or \
                    (isinstance(child, ast.Attribute) and child.attr in PARSERS):
                found.append((child.lineno, where))
            visit(child, where)

    visit(tree, "<module>")
    return found


def test_only_the_store_uri_module_parses_a_store_uri():
    offenders = [f"{p.relative_to(REPO)}:{line} ({where})" for pkg in ("trtfarm", "flows", "tasks")
                 for p in sorted((REPO / pkg).rglob("*.py")) if p != HOME
                 for line, where in _url_parses(p) if (str(p.relative_to(REPO)), where) not in NOT_A_STORE]
    assert offenders == [], f"ask trtfarm.store.uri (uri_parts / is_store_uri / StoreURI) instead: {offenders}"
    assert _url_parses(HOME), "the module itself parses"


@pytest.mark.parametrize(("text", "parts", "store"), [
    ("s3://b/p%20q/", ("s3", "b", "/p%20q/"), True), ("file:///abs/x", ("file", "", "/abs/x"), True),
    ("file://localhost/x", ("file", "localhost", "/x"), True), ("https://h/c.pem", ("https", "h", "/c.pem"), False),
    ("rel/dir", ("", "", "rel/dir"), False)])
def test_uri_parts_are_as_written(text, parts, store):
    assert (uri_parts(text), is_store_uri(text)) == (parts, store)


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
