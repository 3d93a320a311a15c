"""The records of the API check: one use of the TensorRT API, a call's shape, an inferred type, guard probes."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class CallShape:
    """How a call passes its arguments (``starred``: ``*args``/``**kw``, counts unknown)."""

    positional: int
    keywords: tuple[str, ...] = ()
    starred: bool = False
    bound: bool = True  # the instance is implicit (``obj.m(...)``); False for ``Class.m(self, ...)``


@dataclass(frozen=True)
class Use:
    """One use of the API at one place in the source."""

    owner: str  # "tensorrt" (the module) or a class name such as "IBuilderConfig" / "ILogger.Severity"
    name: str
    kind: str  # get | call | set | override | probe | dynamic
    where: str  # "trtfarm/toolchain/builder.py:181"
    call: CallShape | None = None
    guards: frozenset = frozenset()  # (owner, name) pairs that must exist for this use to run
    optional: bool = False  # getattr(..., default) / hasattr(...): the code copes with its absence
    arity: tuple[int, int] | None = None  # override: the positional parameters the callback accepts (incl. self)

    @property
    def api(self) -> str:
        """``IBuilderConfig.set_flag``."""
        return f"{self.owner}.{self.name}"


class Ty(NamedTuple):
    """An inferred type.

    Kinds: M (module), C (class object), I (instance), B/U (bound/unbound method), F (module function), FN (a trtfarm
    function), PL/LD (an external loader class/instance), L (list of ``inner``).
    """

    kind: str
    name: str = ""
    guards: frozenset = frozenset()
    inner: Ty | None = None


MODULE = Ty("M")


def probe(test: ast.expr) -> tuple[ast.expr, str] | None:
    """``hasattr(x, "name")`` (also inside ``a and hasattr(...)``) -> (x, name)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((p for v in test.values if (p := probe(v))), None)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr" and \
            len(test.args) == 2 and isinstance(test.args[1], ast.Constant):
        return test.args[0], test.args[1].value
    return None


def negated_probe(stmt: ast.stmt) -> tuple[ast.expr, str] | None:
    """``if not hasattr(x, "n"): return ...`` -> (x, n): what follows runs only where ``x.n`` exists."""
    if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) and \
            stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) and not stmt.orelse:
        return probe(stmt.test.operand)
    return None
