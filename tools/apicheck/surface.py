"""The real API surface of a TensorRT version, read from NVIDIA's own Python bindings on a machine without libnvinfer.

NVIDIA publishes the bindings as wheels on PyPI (``tensorrt-cu12-bindings``, ``tensorrt-cu13-bindings``); only the
``-libs`` wheels are stubs. ``tensorrt_bindings/tensorrt.so`` links nine C entry points of libnvinfer,
libnvonnxparser and libnvinfer_plugin (``nm -D --undefined-only``). A shared library that defines those nine as
functions returning null, compiled here with the system C compiler under the SONAMEs the module needs
(``readelf -d``), lets ``import tensorrt_bindings`` succeed on a CPU machine: every class, method, property and enum
member is the real one, with pybind11's signatures in each ``__doc__``. Nothing can run through it (every factory
returns null), so the import happens in a subprocess and only its surface comes back, as JSON.

``surface_of(version)`` fetches the wheel once (``~/.cache/trtfarm/tensorrt-bindings/``), builds the library, and
returns the dumped surface; ``python -m tools.apicheck.surface MODULE`` is the subprocess side.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from trtfarm.errors import InfrastructureError

REPO = Path(__file__).resolve().parents[2]  # the checkout: ``python -m tools.apicheck.surface`` runs from there

DUMP_FORMAT = 2  # bump when the dump changes shape: cached surfaces of another format are dumped again
ENTRY_POINTS = {  # C entry points the bindings link, with the signature the null library gives them
    "createInferBuilder_INTERNAL": "void *createInferBuilder_INTERNAL(void *logger, int version)",
    "createInferRuntime_INTERNAL": "void *createInferRuntime_INTERNAL(void *logger, int version)",
    "createInferRefitter_INTERNAL": "void *createInferRefitter_INTERNAL(void *engine, void *logger, int version)",
    "createNvOnnxParser_INTERNAL": "void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version)",
    "createNvOnnxParserRefitter_INTERNAL":
        "void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version)",
    "getPluginRegistry": "void *getPluginRegistry(void)",
    "getBuilderPluginRegistry": "void *getBuilderPluginRegistry(int capability)",
    "initLibNvInferPlugins": "int initLibNvInferPlugins(void *logger, const char *namespace_)",
    "getNvOnnxParserVersion": "int getNvOnnxParserVersion(void)",
}
LIBRARIES = ("libnvinfer", "libnvonnxparser", "libnvinfer_plugin")


class BindingsUnavailable(InfrastructureError):
    """The bindings wheel could not be fetched, the null library not compiled, or the module not imported."""

    service = "the TensorRT bindings check"


def cache_root() -> Path:
    """``$TRTFARM_CACHE/tensorrt-bindings``, else ``~/.cache/trtfarm/tensorrt-bindings``."""
    base = os.environ.get("TRTFARM_CACHE") or Path.home() / ".cache" / "trtfarm"
    return Path(base) / "tensorrt-bindings"


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    except FileNotFoundError as err:
        raise BindingsUnavailable(f"{what}: {cmd[0]} is not installed ({err})") from err
    except subprocess.CalledProcessError as err:
        tail = (err.stderr or err.stdout or "").strip().splitlines()[-3:]
        raise BindingsUnavailable(f"{what} failed (exit {err.returncode}): {' | '.join(tail)}") from err


def fetch_bindings(package: str, version: str, root: Path) -> Path:
    """Download ``package==version`` (no dependencies) with this interpreter's pip, unpack it; return the folder."""
    folder = root / version / "site"
    if (folder / "tensorrt_bindings" / "tensorrt.so").is_file():
        return folder
    wheels = root / version / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wheels),
          f"{package}=={version}"], f"pip download {package}=={version}")
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise BindingsUnavailable(f"pip download {package}=={version} left no wheel in {wheels}")
    tmp = folder.with_name("site.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(found[-1]) as whl:
        whl.extractall(tmp)
    if not (tmp / "tensorrt_bindings" / "tensorrt.so").is_file():
        raise BindingsUnavailable(f"{found[-1].name} has no tensorrt_bindings/tensorrt.so")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def needed_sonames(module_so: Path) -> dict[str, str]:
    """The NEEDED names of the TensorRT libraries the module links: ``{"libnvinfer": "libnvinfer.so.11", ...}``."""
    dynamic = _run(["readelf", "-d", str(module_so)], f"readelf -d {module_so.name}").stdout
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    return {lib: n for n in names for lib in LIBRARIES if n.startswith(lib + ".so")}


def null_libraries(module_so: Path, out: Path) -> Path:
    """Compile the nine entry points as null-returning functions into one library per NEEDED TensorRT SONAME."""
    sonames = needed_sonames(module_so)
    if set(sonames) != set(LIBRARIES):
        raise BindingsUnavailable(f"{module_so}: expected NEEDED {LIBRARIES}, found {sorted(sonames.values())}")
    if all((out / n).is_file() for n in sonames.values()):
        return out
    out.mkdir(parents=True, exist_ok=True)
    source = out / "null_entry_points.c"
    source.write_text("/* trtfarm: libnvinfer's entry points as null stubs (the bindings import; nothing runs) */\n"
                      + "".join(f"{sig} {{ return 0; }}\n" for sig in ENTRY_POINTS.values()))
    cc = os.environ.get("CC", "cc")
    for soname in sonames.values():
        _run([cc, "-shared", "-fPIC", "-w", f"-Wl,-soname,{soname}", "-o", str(out / f"{soname}.tmp"), str(source)],
             f"{cc} (the null {soname})")
        os.replace(out / f"{soname}.tmp", out / soname)
    return out


def surface_of(version: str, package: str, *, root: Path | None = None) -> dict:
    """The dumped API surface of the bindings ``package==version`` (fetched, built and dumped once, then cached)."""
    root = root or cache_root()
    cached = root / version / "surface.json"
    if cached.is_file():
        doc = json.loads(cached.read_text())
        if doc.get("format") == DUMP_FORMAT:
            return doc
    site = fetch_bindings(package, version, root)
    libs = null_libraries(site / "tensorrt_bindings" / "tensorrt.so", root / version / "lib")
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(libs),
                                                                             os.environ.get("LD_LIBRARY_PATH")])),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    doc = json.loads(_run([sys.executable, "-m", "tools.apicheck.surface", "tensorrt_bindings"],
                          f"import tensorrt_bindings {version}", env=env, timeout=300, cwd=REPO).stdout)
    if doc["version"] != version:
        raise BindingsUnavailable(f"{package}=={version} imported as version {doc['version']}")
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, cached)
    return doc


def bindings_env(version: str, package: str, *, root: Path | None = None) -> dict[str, str]:
    """``PYTHONPATH`` and ``LD_LIBRARY_PATH`` under which ``import tensorrt_bindings`` gives ``version``."""
    root = root or cache_root()
    site = fetch_bindings(package, version, root)
    libs = null_libraries(site / "tensorrt_bindings" / "tensorrt.so", root / version / "lib")
    return {"PYTHONPATH": str(site), "LD_LIBRARY_PATH": str(libs)}


def class_name(type_text: str, classes: dict) -> str | None:
    """``tensorrt_bindings.tensorrt.ICudaEngine`` / ``nvonnxparser::IParserError`` -> a class of the surface."""
    text = type_text.strip().removeprefix("typing.").removeprefix("Optional[").rstrip("]")
    for prefix in ("tensorrt_bindings.tensorrt.", "tensorrt_rtx_bindings.tensorrt_rtx.", "tensorrt.", "tensorrt_rtx."):
        text = text.removeprefix(prefix)
    text = text.rsplit("::", 1)[-1]
    for cand in (text, text[1:] if text.startswith("I") else text):
        if cand in classes:
            return cand
    return None


# --- the subprocess side: runs where the real module imported --------------------------------------------------

_SIG = re.compile(r"^(?:\d+\. )?(?P<name>\w+)\((?P<params>.*)\)(?: -> (?P<ret>.+))?$")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets (``list[tuple[int, int]]``, ``<Enum.X: 0>``)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_signatures(name: str, doc: str | None) -> list[dict]:
    """Every overload pybind11 wrote at the head of ``doc``: ``[{"params": [...], "returns": "..."}]``."""
    out = []
    for line in (doc or "").splitlines():
        m = _SIG.match(line.strip())
        if not m or m["name"] != name or m["params"] == "*args, **kwargs":
            continue
        params, kw_only = [], False
        for raw in _split_top(m["params"]):
            if raw in ("/", "*"):
                kw_only = kw_only or raw == "*"
                continue
            head, _, default = raw.partition("=")
            pname, _, ptype = head.partition(":")
            pname = pname.strip()
            kind = ("var_keyword" if pname.startswith("**") else "var_positional" if pname.startswith("*")
                    else "keyword_only" if kw_only else "positional_only" if re.fullmatch(r"arg\d+", pname)
                    else "positional")
            params.append({"name": pname.lstrip("*"), "kind": kind, "default": bool(default.strip()),
                           "type": ptype.strip()})
        out.append({"params": params, "returns": (m["ret"] or "").strip()})
    return out


def _describe_class(cls: type, name: str) -> dict:
    info: dict = {"bases": [b.__name__ for b in cls.__mro__[1:] if b.__module__.startswith("tensorrt")],
                  "enum": hasattr(cls, "__members__"), "members": sorted(getattr(cls, "__members__", {})),
                  "methods": {}, "properties": {}, "attributes": [], "dynamic_attrs": cls.__dictoffset__ != 0,
                  "doc": (cls.__doc__ or "").strip().splitlines()[:1]}
    for attr in dir(cls):
        if attr.startswith("__") and attr not in ("__init__", "__call__", "__len__", "__getitem__", "__iter__"):
            continue
        raw = inspect.getattr_static(cls, attr, None)
        if isinstance(raw, property):
            head = (raw.fget.__doc__ or "").strip().splitlines()[:1] if raw.fget else []
            ret = re.search(r"-> (.+)$", head[0]) if head else None
            info["properties"][attr] = {"type": ret.group(1).strip() if ret else "", "writable": raw.fset is not None}
        elif isinstance(raw, staticmethod) or callable(raw) and not isinstance(raw, type):
            func = getattr(cls, attr)
            info["methods"][attr] = {"static": isinstance(raw, staticmethod),
                                     "overloads": parse_signatures(attr, getattr(func, "__doc__", ""))}
        elif not isinstance(raw, type):
            info["attributes"].append(attr)
    return info


def dump_surface(module) -> dict:
    """The surface of an imported TensorRT-family module, JSON-ready (the subprocess side of ``surface_of``)."""
    doc: dict = {"format": DUMP_FORMAT, "module_name": module.__name__, "version": str(module.__version__),
                 "module": {}, "classes": {}, "functions": {}}
    pending = [(n, getattr(module, n)) for n in dir(module) if not n.startswith("_") or n in ("__version__",)]
    doc["module"]["__version__"] = "attribute"
    doc["module"]["__name__"] = "attribute"
    while pending:
        name, obj = pending.pop()
        if isinstance(obj, type):
            if "." not in name:
                doc["module"][name] = "class"
            doc["classes"][name] = _describe_class(obj, name)
            pending += [(f"{name}.{a}", v) for a, v in vars(obj).items() if isinstance(v, type)
                        and v.__module__.startswith(module.__name__.split(".")[0]) and f"{name}.{a}" not in
                        doc["classes"]]
        elif "." in name:
            continue
        elif callable(obj) and not inspect.ismodule(obj):
            doc["module"][name] = "function"
            doc["functions"][name] = parse_signatures(name, obj.__doc__)
        else:
            doc["module"][name] = "module" if inspect.ismodule(obj) else "attribute"
    return doc


if __name__ == "__main__":  # python -m tools.apicheck.surface MODULE: print its surface as JSON
    import importlib

    print(json.dumps(dump_surface(importlib.import_module(sys.argv[1]))))
