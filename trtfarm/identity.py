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
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtfarm.onnxfile import external_files, load_model, onnx_messages

if TYPE_CHECKING:
    import onnx

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


_HASHED: dict[str, tuple[tuple[int, ...], str]] = {}  # model files this process hashed: path -> (stat, sha256)
_HASHED_LOCK = threading.Lock()


def _stat_key(path: Path) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha256_mentioning(path: Path, word: bytes) -> tuple[str, bool]:
    """``sha256_file``, and whether ``word`` occurs in the file (found as the chunks go by, across their edges)."""
    h, found, edge = hashlib.sha256(), False, b""
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            found = found or word in edge + chunk[:len(word)] or word in chunk
            edge = chunk[-len(word):]
    return h.hexdigest(), found


def _model_file_sha256(path: Path, word: bytes = b"") -> tuple[str, bool]:
    """``_sha256_mentioning`` (or only the digest, without ``word``), remembered for ``sha256_unchanged``.

    The digest is remembered with the file's inode, size and times when nothing wrote the file while it was read.
    """
    before = _stat_key(path)
    digest, found = _sha256_mentioning(path, word) if word else (sha256_file(path), False)
    if _stat_key(path) == before:
        with _HASHED_LOCK:
            _HASHED[str(Path(path).resolve())] = (before, digest)
    return digest, found


def sha256_unchanged(path: Path) -> str:
    """The sha256 of a model file, without reading it again when this process hashed it already.

    The digest ``model_files`` found is reused while the file's inode, size, modification and change times are the
    same (a write changes them); else the file is hashed now. A local build checks the model it planned moments ago
    without reading a large export twice.
    """
    with _HASHED_LOCK:
        seen = _HASHED.get(str(Path(path).resolve()))
    if seen is not None and seen[0] == _stat_key(path):
        return seen[1]
    return _model_file_sha256(path)[0]


def model_files(path: Path, model: onnx.ModelProto | None = None) -> list[tuple[str, str]]:
    """``(name, sha256)`` of every file that makes up the model: the ONNX file, then each external data file.

    Names are relative to the model's folder (the ONNX file by its own name). The manifest lists them.
    Without ``model``, the file is parsed only when it can have external data: a tensor's external data names its
    file under the key ``location``, so a file without those bytes has none.
    """
    path = Path(path)
    digest, mentioned = _model_file_sha256(path, b"location" if model is None else b"")
    if model is None and not mentioned:
        return [(path.name, digest)]
    model = model if model is not None else load_model(path)
    return [(path.name, digest)] + [(loc, _model_file_sha256(f)[0]) for loc, f in external_files(path, model)]


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
        model = load_model(path)
    else:
        copy = onnx_messages().ModelProto()
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
