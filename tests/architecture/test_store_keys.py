"""Store keys are spelled in trtfarm/layout.py only (and, for the keys under no model's folder, its sibling
trtfarm/layout_shared.py): no other module, the command line included, writes a store root.

And a toolchain label (``tensorrt-11.4.0.106``) is made by ``layout.toolchain_label`` only, never ``f"{flavour}-{v}"``.

Read from the syntax tree, not the lines: a string constant or an f-string part that starts with a top-level folder of
the store (``"releases/"``, ``f"plans/{model}"``), and a root's name taken from layout (``f"{TIMING_CACHES}/"``,
``layout.MODELS``), are offences; docstrings and comments are not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trtfarm import layout

REPO = Path(__file__).resolve().parents[2]
LAYOUT = {REPO / "trtfarm" / "layout.py", REPO / "trtfarm" / "layout_shared.py"}  # where keys are spelled
ROOTS = (layout.PLANS, layout.RELEASES, layout.CANDIDATES, layout.RECEIPTS, layout.TIMING_CACHES, layout.CONVERTED,
         layout.MODELS, layout.REPORTS, layout.RUNS, layout.STATUS, layout.STATE, layout.FLEETS, layout.GC, "webhook")
ROOT_NAMES = {"PLANS", "RELEASES", "CANDIDATES", "RECEIPTS", "TIMING_CACHES", "CONVERTED", "MODELS", "REPORTS", "RUNS",
              "STATUS", "STATE", "FLEETS", "GC"}
SPELLED = re.compile(rf"(?:{'|'.join(map(re.escape, ROOTS))})/")


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = (n.body for n in ast.walk(tree)
              if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))
    return {id(b[0].value) for b in bodies if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant)}


def offences_in(source: str) -> list[str]:
    """Each place ``source`` spells a store key's root by hand: ``line: what``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and SPELLED.match(node.value):
            found.append(f"{node.lineno}: {node.value[:40]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module == "trtfarm.layout":
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name in ROOT_NAMES]
        elif isinstance(node, ast.Attribute) and node.attr in ROOT_NAMES and getattr(node.value, "id", "") == "layout":
            found.append(f"{node.lineno}: layout.{node.attr}")
        elif isinstance(node, ast.JoinedStr):
            found += [f"{node.lineno}: a toolchain label" for label in _labels(node.values)]
    return found


def _labels(parts: list[ast.expr]):
    """Each ``{flavour}-{version}`` in an f-string's parts: a toolchain label made by hand."""
    for a, dash, b in zip(parts, parts[1:], parts[2:], strict=False):
        if isinstance(a, ast.FormattedValue) and isinstance(b, ast.FormattedValue) and \
                isinstance(dash, ast.Constant) and dash.value == "-" and "flavour" in ast.unparse(a.value) and \
                isinstance(b.value, (ast.Name, ast.Attribute)) and "version" in ast.unparse(b.value):
            yield a


def test_the_scan_finds_each_way_of_spelling_a_key_by_hand():
    assert offences_in('store.list("releases/")') == ["1: 'releases/'"]
    assert offences_in('key = f"plans/{model}/x"') == ["1: 'plans/'"]
    assert offences_in('from trtfarm.layout import TIMING_CACHES\nk = f"{TIMING_CACHES}/"') == [
        "1: imports TIMING_CACHES"]
    assert offences_in("from trtfarm import layout\nk = layout.MODELS + '/a'") == ["2: layout.MODELS"]
    two = 'q = f"{t.flavour}-{t.version}"\nk = f"{m.model}/{m.target.flavour}-" f"{m.target.toolchain_version}"'
    assert offences_in(two) == ["1: a toolchain label", "2: a toolchain label"]
    assert offences_in('"""Lists ``releases/``."""\nmsg = "see the releases of a model"  # releases/x') == []


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO).as_posix() for p in (REPO / "trtfarm").rglob("*.py")
                                        if p not in LAYOUT))
def test_no_module_outside_layout_spells_a_store_key(path):
    assert offences_in((REPO / path).read_text()) == []
