"""Every use of the TensorRT Python API in trtfarm's source, found by reading the source with ``ast``.

A small type inference over the whole package: a parameter named ``trt``, ``import tensorrt as trt`` and
``import_flavour(...)`` are the module; ``trt.Builder(...)`` is a ``Builder``; a method's result has the type its
pybind11 signature returns (``create_builder_config() -> IBuilderConfig``); arguments flow into the parameters of the
trtfarm functions they are passed to, and return values back out (``deserialize_plan`` returns an ``ICudaEngine``);
lists built from TensorRT objects keep their element type. Each attribute read, call (with its positional count and
keyword names), attribute write, and callback defined by a subclass (``class Monitor(trt.IProgressMonitor)``) is a
``Use``. Uses under ``if hasattr(x, "n")`` (or after ``if not hasattr(...): return``) and through
``getattr(x, "n", default)`` carry that guard: they are checked only against the versions that have ``x.n``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from tools.apicheck.records import MODULE, CallShape, Ty, Use, negated_probe, probe
from tools.apicheck.surface import class_name

FLAVOUR_IMPORTERS = {"trtfarm.machine.flavour:import_flavour"}  # functions that return the TensorRT module
TENSORRT_MODULES = {"tensorrt", "tensorrt_rtx"}
EXTERNAL_LOADERS = {("polygraphy.backend.trt", "EngineFromBytes"): "ICudaEngine"}  # loader()() returns this class


@dataclass
class _Scope:
    key: str
    env: dict[str, set] = field(default_factory=dict)
    funcs: dict[str, str] = field(default_factory=dict)
    guards: frozenset = frozenset()
    parent: _Scope | None = None

    def lookup(self, name: str) -> set:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.env:
                return scope.env[name]
            if name in scope.funcs:
                return {Ty("FN", scope.funcs[name])}
            scope = scope.parent
        return set()


class UseFinder:
    """Infer types over trtfarm's modules against one version's surface and collect the API uses."""

    def __init__(self, surface: dict, sources: dict[str, str]) -> None:
        self.surface, self.classes = surface, surface["classes"]
        self.trees = {path: ast.parse(text, path) for path, text in sources.items()}
        self.params: dict[str, dict[str, set]] = {}
        self.returns: dict[str, set] = {k: {MODULE} for k in FLAVOUR_IMPORTERS}
        self.defs: dict[str, ast.FunctionDef] = {}
        self.uses: set[Use] = set()
        self.path = ""

    # --- surface lookups ---
    def _member(self, cls: str, attr: str) -> tuple[str, dict | None, str]:
        """(kind, info, owner class) of ``cls.attr``: method, property, member, class, attribute or missing."""
        seen, todo = set(), [cls]
        while todo:
            c = todo.pop(0)
            info = self.classes.get(c)
            if info is None or c in seen:
                continue
            seen.add(c)
            if attr in info["methods"]:
                return "method", info["methods"][attr], c
            if attr in info["properties"]:
                return "property", info["properties"][attr], c
            if attr in info["members"]:
                return "member", None, c
            if f"{c}.{attr}" in self.classes:
                return "class", None, c
            if attr in info["attributes"]:
                return "attribute", None, c
            todo += info["bases"]
        return "missing", None, cls

    def _returns(self, overloads: list[dict], guards: frozenset) -> set:
        out = set()
        for o in overloads:
            text = o["returns"]
            if text.lower().startswith(("list[", "typing.list[")):
                inner = class_name(text[text.index("[") + 1:-1], self.classes)
                if inner:
                    out.add(Ty("L", guards=guards, inner=Ty("I", inner, guards)))
            elif (name := class_name(text, self.classes)) is not None:
                out.add(Ty("I", name, guards))
        return out

    # --- recording ---
    def _use(self, scope: _Scope, node: ast.AST, owner: str, name: str, kind: str, t: Ty | None = None,
             **kw) -> None:
        guards = scope.guards | (t.guards if t else frozenset()) | kw.pop("guards", frozenset())
        self.uses.add(Use(owner, name, kind, f"{self.path}:{node.lineno}", guards=guards, **kw))

    def attribute(self, scope: _Scope, node: ast.AST, base: set, attr: str, kind: str = "get",
                  optional: bool = False) -> set:
        """Record ``base.attr`` for each TensorRT type in ``base``; return the types of the result."""
        out = set()
        for t in base:
            guards = t.guards | ({(self._owner(t), attr)} if optional else set())
            if t.kind == "M":
                self._use(scope, node, "tensorrt", attr, kind, t, optional=optional)
                what = self.surface["module"].get(attr)
                if what == "class":
                    out.add(Ty("C", attr, frozenset(guards)))
                elif what == "function":
                    out.add(Ty("F", attr, frozenset(guards)))
            elif t.kind in ("C", "I"):
                self._use(scope, node, t.name, attr, kind, t, optional=optional)
                what, info, owner = self._member(t.name, attr)
                if what == "member":
                    out.add(Ty("I", t.name, frozenset(guards)))
                elif what == "class":
                    out.add(Ty("C", f"{owner}.{attr}", frozenset(guards)))
                elif what == "method":
                    out.add(Ty("B" if t.kind == "I" else "U", f"{t.name}.{attr}", frozenset(guards)))
                elif what == "property" and t.kind == "I" and (c := class_name(info["type"], self.classes)):
                    out.add(Ty("I", c, frozenset(guards)))
        return out

    @staticmethod
    def _owner(t: Ty) -> str:
        return "tensorrt" if t.kind == "M" else t.name

    # --- expressions ---
    def expr(self, node: ast.AST | None, scope: _Scope) -> set:  # noqa: C901 - one branch per node type
        """The types of ``node``, recording every use inside it."""
        if node is None:
            return set()
        if isinstance(node, ast.Name):
            return scope.lookup(node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(scope, node, self.expr(node.value, scope), node.attr)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        if isinstance(node, ast.IfExp):
            self.expr(node.test, scope)
            return self.expr(node.body, scope) | self.expr(node.orelse, scope)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = _Scope(scope.key, parent=scope, guards=scope.guards)
            for gen in node.generators:
                self._bind(gen.target, self._elements(self.expr(gen.iter, inner)), inner)
                for cond in gen.ifs:
                    self.expr(cond, inner)
            if isinstance(node, ast.DictComp):
                self.expr(node.key, inner)
                self.expr(node.value, inner)
                return set()
            return {Ty("L", inner=t) for t in self.expr(node.elt, inner)}
        if isinstance(node, ast.Lambda):
            self.expr(node.body, _Scope(scope.key, parent=scope, guards=scope.guards))
            return set()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child, scope)
        return set()

    @staticmethod
    def _elements(types: set) -> set:
        return {t.inner for t in types if t.kind == "L" and t.inner is not None}

    def call(self, node: ast.Call, scope: _Scope) -> set:
        """A call: getattr/hasattr on TensorRT objects, TensorRT constructors and methods, trtfarm functions."""
        fname = node.func.id if isinstance(node.func, ast.Name) else None
        if fname in ("getattr", "hasattr") and len(node.args) >= 2:
            base = self.expr(node.args[0], scope)
            for extra in node.args[2:]:
                self.expr(extra, scope)
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                if fname == "hasattr":
                    self.attribute(scope, node, base, name.value, kind="probe", optional=True)
                    return set()
                return self.attribute(scope, node, base, name.value, optional=len(node.args) > 2)
            self.expr(name, scope)
            for t in base:
                if t.kind in ("M", "C", "I"):
                    self._use(scope, node, self._owner(t), ast.unparse(name), "dynamic", t)
            return set()
        funcs = self.expr(node.func, scope)
        args = [self.expr(a, scope) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, scope) for k in node.keywords}
        shape = CallShape(len(node.args), tuple(sorted(k for k in kwargs if k)),
                          any(isinstance(a, ast.Starred) for a in node.args) or None in kwargs)
        out = set()
        for f in funcs:
            if f.kind == "C":
                self._use(scope, node, f.name, "__init__", "call", f, call=shape)
                out.add(Ty("I", f.name, f.guards))
            elif f.kind in ("B", "U"):
                cls, _, meth = f.name.rpartition(".")
                self._use(scope, node, cls, meth, "call", f, call=CallShape(**{**shape.__dict__,
                                                                                  "bound": f.kind == "B"}))
                out |= self._returns(self._member(cls, meth)[1]["overloads"], f.guards)
            elif f.kind == "F":
                self._use(scope, node, "tensorrt", f.name, "call", f, call=shape)
                out |= self._returns(self.surface["functions"].get(f.name, []), f.guards)
            elif f.kind == "FN":
                self._flow_into(f.name, args, kwargs)
                out |= self.returns.get(f.name, set())
            elif f.kind == "PL":
                out.add(Ty("LD", f.name))
            elif f.kind == "LD":
                out.add(Ty("I", f.name))
        return out

    def _flow_into(self, key: str, args: list[set], kwargs: dict[str, set]) -> None:
        fn = self.defs.get(key)
        if fn is None:
            return
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
        params = self.params.setdefault(key, {})
        for name, types in [*zip(names, args, strict=False), *((k, v) for k, v in kwargs.items() if k in names)]:
            if types - params.get(name, set()):
                params.setdefault(name, set()).update(types)

    # --- statements ---
    def _bind(self, target: ast.AST, types: set, scope: _Scope) -> None:
        if isinstance(target, ast.Name):
            scope.env.setdefault(target.id, set()).update(types)
        elif isinstance(target, ast.Attribute):
            self.attribute(scope, target, self.expr(target.value, scope), target.attr, kind="set")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._bind(elt, set(), scope)
        else:
            self.expr(target, scope)

    def block(self, body: Iterable[ast.stmt], scope: _Scope) -> frozenset:
        """Walk statements; return the guards an early ``if not hasattr(x, "n"): return`` added.

        Such a return guards the statements after it, also after the ``with`` it sits in.
        """
        start = scope.guards
        for stmt in body:
            added = self.stmt(stmt, scope)
            early = negated_probe(stmt)
            if early is not None:
                added = {(self._owner(t), early[1]) for t in self.expr(early[0], scope) if t.kind in "MCI"}
            if added:
                scope = _Scope(scope.key, parent=scope, guards=scope.guards | added, funcs=scope.funcs)
        return scope.guards - start

    def stmt(self, node: ast.stmt, scope: _Scope) -> frozenset | None:  # noqa: C901 - one branch per statement
        """One statement; returns the guards an early return inside a ``with``/``try`` body adds after it."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            key = f"{scope.key}.{node.name}"
            scope.funcs[node.name] = key
            self.defs[key] = node
            self.function(node, key, scope)
        elif isinstance(node, ast.ClassDef):
            self.subclass(node, scope)
        elif isinstance(node, ast.Assign):
            types = self.expr(node.value, scope)
            for target in node.targets:
                self._bind(target, types, scope)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            self._bind(node.target, self.expr(node.value, scope), scope)
        elif isinstance(node, ast.Return):
            self.returns.setdefault(scope.key, set()).update(self.expr(node.value, scope))
        elif isinstance(node, ast.If):
            self.expr(node.test, scope)
            found = probe(node.test)
            guards = {(self._owner(t), found[1]) for t in self.expr(found[0], scope) if t.kind in "MCI"} \
                if found else set()
            self.block(node.body, _Scope(scope.key, scope.env, scope.funcs, scope.guards | guards, scope.parent))
            self.block(node.orelse, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._bind(node.target, self._elements(self.expr(node.iter, scope)), scope)
            self.block(node.body + node.orelse, scope)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                types = self.expr(item.context_expr, scope)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, types, scope)
            return self.block(node.body, scope)
        elif isinstance(node, (ast.While, ast.Try)):
            if isinstance(node, ast.While):
                self.expr(node.test, scope)
            handlers = [s for h in getattr(node, "handlers", []) for s in h.body]
            self.block(node.body + handlers + node.orelse + getattr(node, "finalbody", []), scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node, scope)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, scope)

    def imports(self, node: ast.Import | ast.ImportFrom, scope: _Scope) -> None:
        """``import tensorrt as trt`` is the module; ``from trtfarm.x import f`` resolves ``f``."""
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in TENSORRT_MODULES:
                    scope.env[a.asname or a.name] = {MODULE}
            return
        for a in node.names:
            local = a.asname or a.name
            if (node.module, a.name) in EXTERNAL_LOADERS:
                scope.env[local] = {Ty("PL", EXTERNAL_LOADERS[node.module, a.name])}
            elif node.module and node.module.startswith("trtfarm") and f"{node.module}:{a.name}" in self.defs:
                scope.funcs[local] = f"{node.module}:{a.name}"

    def subclass(self, node: ast.ClassDef, scope: _Scope) -> None:
        """A class deriving from a TensorRT class: its public methods are callbacks the base must declare."""
        bases = [t for b in node.bases for t in self.expr(b, scope) if t.kind == "C"]
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                args = item.args.posonlyargs + item.args.args
                accepts = (len(args) - len(item.args.defaults), 1000 if item.args.vararg else len(args))
                for base in bases:
                    if not item.name.startswith("_"):
                        self._use(scope, item, base.name, item.name, "override", base, arity=accepts)
                self.function(item, f"{scope.key}.{node.name}.{item.name}", scope)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, key: str, parent: _Scope | None) -> None:
        """Walk a function with its parameters' inferred types."""
        inner = _Scope(key, parent=parent, guards=parent.guards if parent else frozenset())
        known = self.params.get(key, {})
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            inner.env[a.arg] = {MODULE} if a.arg == "trt" else set(known.get(a.arg, set()))
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.expr(default, parent or inner)
        self.block(node.body, inner)

    # --- driver ---
    def run(self, passes: int = 6) -> set[Use]:
        """Walk every module until the inferred types stop growing; return the uses of the last walk."""
        modules = {path: path.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for path in self.trees}
        for path, tree in self.trees.items():
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.defs[f"{modules[path]}:{node.name}"] = node
        before = None
        for _ in range(passes):
            self.uses = set()
            for path, tree in self.trees.items():
                self.path = path
                top = _Scope(modules[path] + ":")
                top.funcs.update({n.name: f"{modules[path]}:{n.name}" for n in tree.body
                                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
                for node in tree.body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.function(node, f"{modules[path]}:{node.name}", top)
                    else:
                        self.stmt(node, top)
            state = (repr(sorted((k, sorted(map(repr, v))) for k, p in self.params.items() for v in p.values())),
                     repr(sorted((k, sorted(map(repr, v))) for k, v in self.returns.items())))
            if state == before:
                break
            before = state
        return self.uses


def find_uses(surface: dict, sources: dict[str, str]) -> set[Use]:
    """Every TensorRT API use in ``sources`` ({relative path: text}), typed against ``surface``."""
    return UseFinder(surface, sources).run()
