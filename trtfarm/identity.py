"""Content addresses: what a model, a graph and a build *are*, as sha256 digests.

- ``onnx_digest``: the ONNX bytes and every external data file its tensors reference (initializers, Constant
  values and subgraphs alike).
- ``graph_digest``: the graph with initializer values left out; equal graph digests differ only in weights.
- ``build_digest``: canonical JSON of everything that changes the plan. It keys on the compatibility class, so
  GPU models that share one plan share one build.

This module computes digests; ``trtfarm.layout`` turns them into keys; the store only stores them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import onnx

from trtfarm.onnxfile import external_files

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def model_files(path: Path, model: onnx.ModelProto | None = None) -> list[tuple[str, str]]:
    """``(name, sha256)`` of every file that makes up the model: the ONNX file, then each external data file.

    Names are relative to the model's folder (the ONNX file by its own name). The manifest lists them.
    """
    path = Path(path)
    model = model if model is not None else onnx.load(str(path), load_external_data=False)
    return [(path.name, sha256_file(path))] + [(loc, sha256_file(f)) for loc, f in external_files(path, model)]


def files_digest(files: list[tuple[str, str]]) -> str:
    """The ``onnx_digest`` of ``model_files``: the ONNX file's sha256, then each external file's name and sha256."""
    h = hashlib.sha256()
    h.update(bytes.fromhex(files[0][1]))
    for name, digest in files[1:]:
        h.update(name.encode())
        h.update(bytes.fromhex(digest))
    return h.hexdigest()


def onnx_digest(path: Path) -> str:
    """Sha256 over the ONNX file and, in name order, each external data file any of its tensors references."""
    return files_digest(model_files(path))


def graph_digest(path: Path, model: onnx.ModelProto | None = None) -> str:
    """Sha256 of the graph with every initializer's values cleared (names, types and shapes kept).

    ``model``: the file at ``path`` parsed already (without external data); it is left as it is.
    """
    if model is None:
        model = onnx.load(str(path), load_external_data=False)
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
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
    """Sha256 of canonical JSON of every input that changes the plan.

    The document is ``{"compat_class", "onnx", "profiles", "settings", "toolchain": {"flavour", "version"}}``;
    ``build_digest_of`` computes the same digest from its two halves serialised once (``model_digest_part``,
    ``target_digest_part``), for views that digest a model for many targets.
    """
    return build_digest_of(model_digest_part(converted_onnx_digest, profiles),
                           target_digest_part(settings, flavour, toolchain_version, compat_class))


def model_digest_part(converted_onnx_digest: str, profiles: list[dict]) -> bytes:
    """The model's half of the build digest's canonical JSON: ``"onnx":...,"profiles":...``."""
    return b'"onnx":' + canonical_json(converted_onnx_digest) + b',"profiles":' + canonical_json(profiles)


def target_digest_part(settings: dict, flavour: str, toolchain_version: str, compat_class: str) -> tuple[bytes, bytes]:
    """The target's half: ``"compat_class":...`` (before the model's keys) and ``"settings":...,"toolchain":...``."""
    return (b'"compat_class":' + canonical_json(compat_class),
            b'"settings":' + canonical_json(settings) + b',"toolchain":'
            + canonical_json({"flavour": flavour, "version": toolchain_version}))


def build_digest_of(model: bytes, target: tuple[bytes, bytes]) -> str:
    """The build digest from its halves: the canonical JSON's keys in sorted order, as ``canonical_json`` writes."""
    return hashlib.sha256(b"{" + target[0] + b"," + model + b"," + target[1] + b"}").hexdigest()


def model_name_from_path(path: Path) -> str:
    """Default model name: the file stem, or the folder name for a ``model.onnx`` inside a model export folder."""
    path = Path(path).absolute()  # `model.onnx` given from inside its folder is named after that folder too
    stem = path.parent.name if path.stem == "model" and path.parent.name else path.stem
    return re.sub(r"[^A-Za-z0-9._-]", "-", stem).strip("-.") or "model"
