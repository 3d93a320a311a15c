"""Content addresses: what a model, a graph and a build *are*, as sha256 digests.

- ``onnx_digest``: the ONNX bytes and any external data files.
- ``graph_digest``: the graph with initializer values left out; equal graph digests differ only in weights.
- ``build_digest``: canonical JSON of everything that changes the plan. It keys on the compatibility class, so
  GPU models that share one plan share one build.

This module computes digests; ``trtfarm.publishing.layout`` turns them into keys; the store only stores them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import onnx

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _external_files(model: onnx.ModelProto) -> list[str]:
    names = set()
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            names.update(e.value for e in init.external_data if e.key == "location")
    return sorted(names)


def onnx_digest(path: Path) -> str:
    """Sha256 over the ONNX file and, in name order, each external data file it references."""
    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    h = hashlib.sha256()
    h.update(bytes.fromhex(sha256_file(path)))
    for name in _external_files(model):
        h.update(name.encode())
        h.update(bytes.fromhex(sha256_file(path.parent / name)))
    return h.hexdigest()


def graph_digest(path: Path) -> str:
    """Sha256 of the graph with every initializer's values cleared (names, types and shapes kept)."""
    model = onnx.load(str(path), load_external_data=False)
    for init in list(model.graph.initializer):
        dims, dtype, name = list(init.dims), init.data_type, init.name
        init.Clear()
        init.name, init.data_type = name, dtype
        init.dims.extend(dims)
    del model.graph.sparse_initializer[:]
    model.ClearField("producer_version")
    model.ClearField("doc_string")
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def build_digest(*, converted_onnx_digest: str, profiles: list[dict], settings: dict, flavour: str,
                 toolchain_version: str, compat_class: str) -> str:
    """Sha256 of canonical JSON of every input that changes the plan."""
    doc = {
        "onnx": converted_onnx_digest,
        "profiles": profiles,
        "settings": settings,
        "toolchain": {"flavour": flavour, "version": toolchain_version},
        "compat_class": compat_class,
    }
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def model_name_from_path(path: Path) -> str:
    """Default model name: the file stem, or the folder name for a ``model.onnx`` inside a model export folder."""
    path = Path(path)
    stem = path.parent.name if path.stem == "model" and path.parent.name else path.stem
    return re.sub(r"[^A-Za-z0-9._-]", "-", stem).strip("-.") or "model"
