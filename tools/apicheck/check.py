"""trtfarm's TensorRT code checked against NVIDIA's own bindings of each supported version (names and signatures).

For each version in ``TENSORRT_BINDINGS`` (``trtfarm/vocabulary/fleet.py``): the real API surface of that version's
bindings (``surface``), every use of the API in trtfarm's source (``uses``), and each use checked against the
surface: the module attribute, class, method, property or enum member exists; a call binds to one of the method's
pybind11 overloads (positional count, keyword names); an assigned property has a setter (or the class takes new
attributes); a callback a subclass defines exists in the base with the arity the base declares. A use guarded by
``hasattr``/``getattr(..., default)`` is checked only against the versions that have what it is guarded by, and is
reported only when no supported version (nor the installed TensorRT-RTX, which shares the code) has it at all.

This proves the code calls an API that exists in that version, as it is declared. It does not prove TensorRT
behaves as the code expects: nothing is built or run through the bindings (their entry points return null).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tools.apicheck.surface import BindingsUnavailable, surface_of
from tools.apicheck.uses import Use, find_uses
from trtfarm.vocabulary.fleet import TENSORRT_BINDINGS, HardwareCompatibility

REPO = Path(__file__).resolve().parents[2]  # the checkout: tools/ beside trtfarm/
PACKAGE_ROOT = REPO / "trtfarm"
REFERENCE_MODULE = "tensorrt_rtx"  # shares the builder: a guarded use may be there for it alone


def _builder_flags() -> list[str]:
    from trtfarm.toolchain.builder import REFIT_FLAGS

    return sorted({"TF32", "STRIP_PLAN", *REFIT_FLAGS.values()})


def _log_severities() -> list[str]:
    from trtfarm.toolchain.trtlog import LOG_SEVERITIES

    return list(LOG_SEVERITIES)


# getattr(trt.X, <name computed at run time>): the names the code can compute, from the code's own tables.
# A dynamic lookup that is not declared here is reported as missing, so a new one cannot go unchecked.
DYNAMIC_NAMES: dict[tuple[str, str, str], Callable[[], list[str]]] = {
    ("trtfarm/toolchain/builder.py", "HardwareCompatibilityLevel", "level"):
        lambda: sorted(h.name.upper() for h in HardwareCompatibility),
    ("trtfarm/toolchain/builder.py", "BuilderFlag", "name"): _builder_flags,
    ("trtfarm/toolchain/trtlog.py", "Logger", "name"): _log_severities,
}


@dataclass
class VersionReport:
    """The check of one TensorRT version: distinct API names checked, and what failed."""

    version: str
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    signature_mismatches: list[str] = field(default_factory=list)
    apis: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every use exists and every call binds."""
        return not self.missing and not self.signature_mismatches

    def to_json(self) -> dict:
        """The ``--json`` shape: checked, missing, signature_mismatches."""
        return {"checked": self.checked, "missing": self.missing, "signature_mismatches": self.signature_mismatches}


def trtfarm_sources(root: Path = PACKAGE_ROOT) -> dict[str, str]:
    """Every module of the trtfarm package: {``trtfarm/...py``: text}."""
    return {p.relative_to(root.parent).as_posix(): p.read_text() for p in sorted(root.rglob("*.py"))}


def _lineage(surface: dict, owner: str):
    """``(class, info)`` of ``owner`` and its bases, nearest first, each once (those the surface knows)."""
    seen, todo = set(), [owner]
    while todo:
        cls = todo.pop(0)
        info = surface["classes"].get(cls)
        if info is None or cls in seen:
            continue
        seen.add(cls)
        yield cls, info
        todo += info["bases"]


def _has(surface: dict, owner: str, name: str) -> bool:
    if owner == "tensorrt":
        return name in surface["module"]
    return any(name in info["methods"] or name in info["properties"] or name in info["members"]
               or name in info["attributes"] or f"{cls}.{name}" in surface["classes"]
               for cls, info in _lineage(surface, owner))


def _overloads(surface: dict, owner: str, name: str) -> list[dict]:
    if owner == "tensorrt":
        return surface["functions"].get(name, [])
    return next((info["methods"][name]["overloads"] for _, info in _lineage(surface, owner)
                 if name in info["methods"]), [])


_KINDS = {"positional": inspect.Parameter.POSITIONAL_OR_KEYWORD, "positional_only": inspect.Parameter.POSITIONAL_ONLY,
          "keyword_only": inspect.Parameter.KEYWORD_ONLY, "var_positional": inspect.Parameter.VAR_POSITIONAL,
          "var_keyword": inspect.Parameter.VAR_KEYWORD}


def signature(overload: dict) -> inspect.Signature:
    """An ``inspect.Signature`` for one pybind11 overload (``arg0``-style names are positional-only)."""
    params, seen_default = [], False
    last_positional_only = max((i for i, p in enumerate(overload["params"]) if p["kind"] == "positional_only"),
                               default=-1)
    for i, p in enumerate(overload["params"]):
        kind = _KINDS[p["kind"]] if i > last_positional_only else inspect.Parameter.POSITIONAL_ONLY
        seen_default = seen_default or p["default"]
        default = None if p["default"] or (seen_default and kind.name.startswith("POSITIONAL")) else \
            inspect.Parameter.empty
        if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            default = inspect.Parameter.empty
        params.append(inspect.Parameter(p["name"], kind, default=default))
    return inspect.Signature(params)


def binds(overload: dict, positional: int, keywords: tuple[str, ...], bound: bool = True) -> bool:
    """True when a call with ``positional`` arguments and ``keywords`` binds to ``overload``."""
    try:
        signature(overload).bind(*([None] * (positional + (1 if bound else 0))), **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def describe(overload: dict) -> str:
    """``set_flag(self, flag: BuilderFlag) -> None``."""
    params = ", ".join(p["name"] + (f": {p['type'].rsplit('.', 1)[-1]}" if p["type"] else "") for p in
                       overload["params"])
    return f"({params}) -> {overload['returns'].rsplit('.', 1)[-1]}"


def _check_call(surface: dict, use: Use) -> str | None:
    overloads = _overloads(surface, use.owner, use.name)
    if use.call is None or use.call.starred or not overloads:
        return None
    c = use.call
    if any(binds(o, c.positional, c.keywords, c.bound) for o in overloads):
        return None
    passed = f"{c.positional} positional" + (f", keywords {list(c.keywords)}" if c.keywords else "") + \
        ("" if c.bound else " (self included)")
    return f"{use.api}({passed}) at {use.where}: no overload accepts it; declared: " + \
        " | ".join(describe(o) for o in overloads)


def _check_set(surface: dict, use: Use) -> tuple[str | None, str | None]:
    info = surface["classes"].get(use.owner, {})
    prop = next((surface["classes"][c]["properties"][use.name] for c in [use.owner, *info.get("bases", [])]
                 if use.name in surface["classes"].get(c, {}).get("properties", {})), None)
    if prop is not None:
        return None, None if prop["writable"] else f"{use.api} = ... at {use.where}: a read-only property"
    if _has(surface, use.owner, use.name) or info.get("dynamic_attrs"):
        return None, None
    return f"{use.api} (assigned at {use.where}: {use.owner} takes no new attributes)", None


def _check_override(surface: dict, use: Use) -> str | None:
    lo, hi = use.arity or (0, 1000)
    overloads = _overloads(surface, use.owner, use.name)
    if not overloads or any(lo <= len(o["params"]) <= hi for o in overloads):
        return None
    return f"{use.api} overridden at {use.where} with {lo}-{hi} parameters (incl. self); TensorRT calls " + \
        " | ".join(describe(o) for o in overloads)


def _dynamic(use: Use) -> list[str] | None:
    path = use.where.rsplit(":", 1)[0]
    names = DYNAMIC_NAMES.get((path, use.owner, use.name))
    return names() if names else None


def check_uses(surface: dict, uses: set[Use], present_elsewhere: Callable[[str, str], bool]) -> VersionReport:
    """Check ``uses`` against one version's ``surface``.

    ``present_elsewhere(owner, name)``: another checked version or the reference module has it (a guarded use absent
    here is then fine).
    """
    report = VersionReport(surface["version"])
    missing: dict[str, list[str]] = {}
    apis = set()
    for use in sorted(uses, key=lambda u: (u.where, u.api, u.kind)):
        if not all(_has(surface, o, n) for o, n in use.guards):
            continue  # guarded by something this version lacks: this code does not run on it
        if use.kind == "dynamic":
            names = _dynamic(use)
            if names is None:
                missing.setdefault(f"{use.owner}.<{use.name}> (a name computed at run time: declare the names it "
                                   "can take in tools/apicheck/check.py DYNAMIC_NAMES)", []).append(use.where)
                continue
            for n in names:
                apis.add(f"{use.owner}.{n}")
                if not _has(surface, use.owner, n):
                    missing.setdefault(f"{use.owner}.{n}", []).append(use.where)
            continue
        if use.kind == "set":
            absent, mismatch = _check_set(surface, use)
            if absent:
                missing.setdefault(absent, [])
            if mismatch:
                report.signature_mismatches.append(mismatch)
            apis.add(use.api)
            continue
        present = _has(surface, use.owner, use.name)
        if not present:
            if not use.optional or not present_elsewhere(use.owner, use.name):
                note = " (guarded, but present in no supported version)" if use.optional else ""
                missing.setdefault(use.api + note, []).append(use.where)
            continue
        apis.add(use.api)
        problem = _check_override(surface, use) if use.kind == "override" else \
            _check_call(surface, use) if use.kind == "call" else None
        if problem:
            report.signature_mismatches.append(problem)
    report.missing = [f"{api} at {', '.join(sorted(set(w)))}" if w else api for api, w in sorted(missing.items())]
    report.signature_mismatches = sorted(set(report.signature_mismatches))
    report.apis = sorted(apis)
    report.checked = len(apis)
    return report


@lru_cache(maxsize=4)
def reference_surface(module: str = REFERENCE_MODULE) -> dict | None:
    """The installed TensorRT-RTX's surface (a real import), or None when it does not import here."""
    done = subprocess.run([sys.executable, "-m", "tools.apicheck.surface", module], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    return json.loads(done.stdout) if done.returncode == 0 else None


def check_versions(versions: dict[str, str] | None = None, sources: dict[str, str] | None = None) -> dict[str,
                                                                                                       VersionReport]:
    """Check trtfarm's source (or ``sources``) against each version's bindings ({version: wheel package})."""
    versions = dict(TENSORRT_BINDINGS if versions is None else versions)
    sources = trtfarm_sources() if sources is None else sources
    surfaces = {v: surface_of(v, package) for v, package in versions.items()}
    others = [*surfaces.values(), *filter(None, [reference_surface()])]

    def elsewhere(owner: str, name: str) -> bool:
        return any(_has(s, owner, name) for s in others)

    return {v: check_uses(s, find_uses(s, sources), elsewhere) for v, s in surfaces.items()}


def versions_json(reports: dict[str, VersionReport]) -> dict:
    """``{"versions": {"<version>": {"checked": N, "missing": [...], "signature_mismatches": [...]}}}``."""
    return {"versions": {v: r.to_json() for v, r in reports.items()}}


__all__ = ["BindingsUnavailable", "VersionReport", "check_uses", "check_versions", "trtfarm_sources",
           "versions_json"]
