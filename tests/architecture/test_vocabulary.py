"""The vocabulary only names: values and their validation, read from the source (``ast``).

``trtfarm/vocabulary/`` imports no store or publishing module, no scan of this machine's GPUs or toolchains, no
``onnx`` (``onnx.checker`` included) and no ``subprocess``, and keeps no cache in a module (a decorator cache, a
module-level container a function fills, an empty one, or a ``global``). The reading, scanning and deriving live in
``project/``, ``machine/``, ``profiles/`` and ``planning/``. And no two modules of trtfarm/ share a file name.
"""

from __future__ import annotations

import ast
from collections import Counter

from tests.architecture.test_layers import REPO, imports

VOCABULARY = REPO / "trtfarm" / "vocabulary"
FORBIDDEN = {  # a module imported, or any module under it -> why the vocabulary may not import it
    "trtfarm.store": "store I/O", "trtfarm.publishing": "store I/O", "boto3": "store I/O",
    "trtfarm.machine.gpu": "a GPU scan", "trtfarm.machine.capabilities": "a GPU scan",
    "trtfarm.machine.flavour": "a toolchain scan", "pynvml": "a GPU scan",
    "onnx": "its checker", "subprocess": "a subprocess",
}
CACHE_DECORATORS = {"cache", "lru_cache", "cached_property"}
MUTATORS = {"append", "add", "update", "setdefault", "extend", "insert", "pop", "popitem", "clear", "remove"}
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "WeakValueDictionary"}

ALLOWED: dict[str, set[str]] = {}  # no module of the vocabulary is excused


def _forbidden_imports(tree: ast.Module) -> list[str]:
    found = set()
    for name in imports_of(tree):
        for banned, why in FORBIDDEN.items():
            if name == banned or name.startswith(banned + "."):
                found.add(f"imports {banned} ({why})")
    return sorted(found)


def imports_of(tree: ast.Module) -> set[str]:
    """``imports`` of test_layers, on a parsed tree (every import, inside functions too)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in MUTABLE_CALLS


def _empty(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (getattr(value, "keys", None) or getattr(value, "elts", None))
    return isinstance(value, ast.Call) and _mutable(value) and not value.args and not value.keywords


def _caches(tree: ast.Module) -> list[str]:
    found = set()
    containers = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and _mutable(node.value):
                containers[t.id] = node.value
                if _empty(node.value):
                    found.add(f"module-level cache {t.id}")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                name = getattr(d.func if isinstance(d, ast.Call) else d, "attr", None) or \
                    getattr(d.func if isinstance(d, ast.Call) else d, "id", None)
                if name in CACHE_DECORATORS:
                    found.add(f"cache decorator on {node.name}")
            for inner in ast.walk(node):
                if isinstance(inner, ast.Global):
                    found.update(f"global {n} in {node.name}" for n in inner.names)
                elif isinstance(inner, (ast.Assign, ast.AugAssign, ast.Delete)):
                    for t in getattr(inner, "targets", None) or [inner.target]:
                        if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) in containers:
                            found.add(f"module-level cache {t.value.id}")
                elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and \
                        inner.func.attr in MUTATORS and getattr(inner.func.value, "id", None) in containers:
                    found.add(f"module-level cache {inner.func.value.id}")
    return sorted(found)


def offences(source: str) -> list[str]:
    """What in ``source`` is more than naming and validating values."""
    tree = ast.parse(source)
    return _forbidden_imports(tree) + _caches(tree)


def test_the_vocabulary_imports_no_store_no_scan_no_onnx_no_subprocess_and_keeps_no_cache():
    found = {p.name: set(offences(p.read_text())) for p in sorted(VOCABULARY.glob("*.py"))}
    extra = {name: sorted(o - ALLOWED.get(name, set())) for name, o in found.items()}
    assert {name: o for name, o in extra.items() if o} == {}


def test_the_check_catches_each_kind_of_work():
    """The checks above would fail on each kind of work they forbid (and pass plain values)."""
    source = '''
import functools
import subprocess
from onnx import checker
from trtfarm.store import open_store
from trtfarm.machine.capabilities import local_capabilities
_SEEN: dict[str, int] = {}
_BY_NAME = {"a": 1}
_LAST = None
KNOWN = {"h100": "0x2330"}

@functools.lru_cache
def named(x): return x

def remember(k, v):
    _BY_NAME[k] = v

def last(v):
    global _LAST
    _LAST = v
'''
    assert offences(source) == [
        "imports onnx (its checker)", "imports subprocess (a subprocess)",
        "imports trtfarm.machine.capabilities (a GPU scan)", "imports trtfarm.store (store I/O)",
        "cache decorator on named", "global _LAST in last", "module-level cache _BY_NAME",
        "module-level cache _SEEN"]
    assert offences('KNOWN = {"h100": "0x2330"}\n\ndef key(n):\n    return KNOWN.get(n)\n') == []


def test_no_two_modules_of_trtfarm_share_a_name():
    """One module per name: ``outcome.py`` in three packages reads as one thing and is three."""
    stems = Counter(p.stem for p in (REPO / "trtfarm").rglob("*.py") if p.stem not in ("__init__", "__main__"))
    shared = {s: sorted(str(p.relative_to(REPO)) for p in (REPO / "trtfarm").rglob(f"{s}.py"))
              for s, n in stems.items() if n > 1}
    assert shared == {}


def test_the_layer_tests_imports_agree_with_this_ones():
    """``imports_of`` reads imports as test_layers does (the same tree gives the same names)."""
    path = VOCABULARY / "fleet.py"
    assert imports_of(ast.parse(path.read_text())) == imports(path)
