"""What an ONNX file says as real exporters write it: its dimensions and the files its tensors live in.

- A dimension is ``dim_value`` (an int), ``dim_param`` (a name) or unset. Paddle2ONNX and older converters write a
  dynamic dimension as ``dim_value: -1``: in ONNX and in TensorRT's parser any negative value is dynamic
  (``static_dim``). Dimensions that share a ``dim_param`` name are one symbolic size to TensorRT.
- External data: any tensor (an initializer, a sparse initializer, a ``Constant`` node's value, in the main graph
  or a subgraph) may keep its bytes in a file beside the model (``external_data`` key ``location``). Every such file
  is part of the model: its digest, its upload, its fetch. A location that leaves the model's folder is refused.
- ONNX's messages and checker come from the ``onnx`` wheel without its package ``__init__`` (``onnx_messages``):
  ``import onnx`` imports numpy, ml_dtypes and ``onnx.helper`` (about 0.3 s), which reading and checking a file
  never needs.

What the graph's sizes mean (names computed from other names, inputs that are shapes) is ``onnxshapes.py``'s.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from trtfarm.errors import UserInputError, invalid_model

if TYPE_CHECKING:
    import onnx

_PARTS: dict[str, ModuleType] = {}
_PARTS_LOCK = threading.Lock()
_FILES = {"messages": "onnx_ml_pb2.py", "native": "onnx_cpp2py_export"}  # in the onnx wheel's package folder
_NAMES = {"messages": "onnx.onnx_ml_pb2", "native": "onnx.onnx_cpp2py_export"}


def _load_module(name: str, path: str) -> ModuleType:
    """Load one module of the onnx wheel under its own name, so a later ``import onnx`` uses this very module."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _standalone(part: str) -> ModuleType:
    """``onnx.onnx_ml_pb2`` or ``onnx.onnx_cpp2py_export`` from the installed wheel, without ``onnx/__init__``."""
    if _NAMES[part] in sys.modules:
        return sys.modules[_NAMES[part]]
    spec = importlib.util.find_spec("onnx")  # finds the package; runs none of it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("onnx is not installed")
    root = spec.submodule_search_locations[0]
    suffixes = [""] if part == "messages" else importlib.machinery.EXTENSION_SUFFIXES
    path = next(os.path.join(root, _FILES[part] + suffix) for suffix in suffixes
                if os.path.isfile(os.path.join(root, _FILES[part] + suffix)))
    return _load_module(_NAMES[part], path)


def _onnx_part(part: str) -> ModuleType:
    with _PARTS_LOCK:
        if part not in _PARTS:
            if "onnx" not in sys.modules:
                try:
                    _PARTS[part] = _standalone(part)
                except (ImportError, OSError, StopIteration):
                    pass
            if part not in _PARTS:
                import onnx.onnx_cpp2py_export
                import onnx.onnx_ml_pb2

                _PARTS[part] = onnx.onnx_ml_pb2 if part == "messages" else onnx.onnx_cpp2py_export
        return _PARTS[part]


def onnx_messages() -> ModuleType:
    """ONNX's protobuf messages (``ModelProto``, ``TensorProto``, ...): the module ``import onnx`` uses.

    Loaded from the onnx wheel under its own name without the package's ``__init__`` (so importing onnx later, as
    the precision step does, reuses it). Where onnx is imported already, or its wheel is not laid out as onnx 1.x
    lays it out, it comes from ``import onnx``.
    """
    return _onnx_part("messages")


def onnx_native() -> ModuleType:
    """ONNX's C++ extension (``.checker``), loaded as ``onnx_messages`` is."""
    return _onnx_part("native")


def load_model(path: str | Path, *, weights: bool = False) -> onnx.ModelProto:
    """The ModelProto of the file at ``path``: ``onnx.load(path, load_external_data=weights)``, the one reader.

    ``weights``: the external data files' bytes are read into the model too (that alone imports onnx). Raises
    ``google.protobuf.message.DecodeError`` for bytes that are not a ModelProto, as ``onnx.load`` does.
    """
    from google.protobuf.message import DecodeError

    data, model = Path(path).read_bytes(), onnx_messages().ModelProto()
    decoded = model.ParseFromString(data)
    if decoded is not None and decoded != len(data):
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {len(data)}")
    if weights:
        from onnx.external_data_helper import load_external_data_for_model
        load_external_data_for_model(model, os.path.dirname(os.fspath(path)))
    return model


def check_model(path: str | Path) -> None:
    """``onnx.checker.check_model(path)``: raises ``check_errors()`` for a model that is not valid ONNX."""
    onnx_native().checker.check_model_path(os.fspath(path), False, False, False)


def check_errors() -> tuple[type[BaseException], ...]:
    """What ``check_model`` and ``load_model`` raise for a bad file (the checker's ValidationError among them)."""
    from google.protobuf.message import DecodeError

    return (onnx_native().checker.ValidationError, DecodeError, ValueError, OSError)


def static_dim(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """The fixed size of a dimension, or None when it is dynamic (a name, unset, or a negative ``dim_value``)."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None


def dim_label(dim: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A fixed size (int), the name of a named dynamic dimension (str), or None for an unnamed dynamic one."""
    fixed = static_dim(dim)
    if fixed is not None:
        return fixed
    return dim.dim_param if dim.HasField("dim_param") and dim.dim_param else None


def _node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        for sparse in [attr.sparse_tensor] * attr.HasField("sparse_tensor") + list(attr.sparse_tensors):
            yield sparse.values
            yield sparse.indices
        for sub in [attr.g] * attr.HasField("g") + list(attr.graphs):
            yield from _graph_tensors(sub)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor that can hold weights: initializers, sparse ones, node attributes, in every (sub)graph."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The ``location`` of every external data file the model's tensors reference, sorted, each once."""
    found, external = set(), onnx_messages().TensorProto.EXTERNAL
    for tensor in all_tensors(model):
        if tensor.data_location == external:
            found.update(e.value for e in tensor.external_data if e.key == "location")
    return sorted(found)


def location_path(model_path: Path, location: str) -> Path:
    """Where an external data ``location`` of the model at ``model_path`` lives; refused when it leaves the folder.

    A location is relative to the model's folder and must stay inside it (no absolute path, no ``..``): a model
    export is one folder, so what it references is what gets digested, uploaded and fetched.
    """
    rel = PurePosixPath(location.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise UserInputError(f"{model_path}: a tensor keeps its data in {location!r}, outside the model's folder. "
                             "Fix: save the model with its external data beside it (onnx.save(..., "
                             "save_as_external_data=True, location='weights.bin'))")
    return Path(model_path).parent.joinpath(*rel.parts)


def external_files(path: Path, model: onnx.ModelProto | None = None) -> list[tuple[str, Path]]:
    """``(location, file)`` for each external data file of the model at ``path``; refused when unsafe or missing."""
    path = Path(path)
    model = model if model is not None else load_model(path)
    files = []
    for location in external_locations(model):
        file = location_path(path, location)
        if not file.is_file():
            raise UserInputError(f"{path}: its weights live in {location!r}, which is not there ({file}). Fix: copy "
                                 "every external data file the model references next to it")
        files.append((location, file))
    return files


# --- the graph's inputs and nodes, read from a memory map without parsing the weights ----------------------------

# Per dimension: its fixed size (int), or, when dynamic, its name (str: dims sharing one name are one size to
# TensorRT) or None (unnamed). The whole value is None when the rank is unknown.
InputDims = tuple[int | str | None, ...] | None
_T = TypeVar("_T")


def _varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """Protobuf wire format: ``(field number, wire type, start, end)`` of each field in ``buf[start:end]``."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, after = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            after = pos + size
        elif wire in (1, 5):
            after = pos + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if after > end:
            raise ValueError("truncated protobuf field")
        yield field, wire, pos, after
        pos = after


def _tensor_name(buf, start: int, end: int) -> str | None:
    return next((bytes(buf[s:e]).decode() for f, w, s, e in _fields(buf, start, end) if f == 8 and w == 2), None)


def _graph(buf, *, nodes: bool) -> tuple[list[onnx.ValueInfoProto], list[onnx.NodeProto]]:
    """The graph's inputs (initializers left out: IR < 4 lists them as inputs too) and, with ``nodes``, its nodes.

    Only those fields are parsed (ModelProto.graph is field 7; GraphProto's node 1, initializer 5, input 11,
    sparse_initializer 15); the weights' bytes are skipped.
    """
    messages = onnx_messages()  # the message classes only: no numpy, no onnx.helper on the build path
    graph = next(((s, e) for f, w, s, e in _fields(buf, 0, len(buf)) if f == 7 and w == 2), None)
    if graph is None:
        raise ValueError("no graph")
    inputs, found, weights = [], [], set()
    for field, wire, s, e in _fields(buf, *graph):
        if wire != 2:
            continue
        if field == 11:
            inputs.append(messages.ValueInfoProto.FromString(bytes(buf[s:e])))
        elif field == 1 and nodes:
            found.append(messages.NodeProto.FromString(bytes(buf[s:e])))
        elif field == 5:  # a TensorProto: its name is field 8
            weights.add(_tensor_name(buf, s, e))
        elif field == 15:  # a SparseTensorProto: the name is its values tensor's (field 1)
            values = next(((vs, ve) for f, w, vs, ve in _fields(buf, s, e) if f == 1 and w == 2), None)
            weights.add(_tensor_name(buf, *values) if values else None)
    return [vi for vi in inputs if vi.name not in weights], found


def _mapped(path: str | Path, read: Callable[[mmap.mmap], _T]) -> _T:
    path = Path(path)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return read(buf)
    except (OSError, ValueError, IndexError, UnicodeDecodeError) as err:
        raise invalid_model(path, err) from err


def _dims(vi: onnx.ValueInfoProto) -> InputDims:
    tensor = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    shape = tensor.shape if tensor is not None and tensor.HasField("shape") else None
    return None if shape is None else tuple(dim_label(d) for d in shape.dim)


def onnx_inputs(path: str | Path) -> dict[str, InputDims]:
    """The graph inputs of an ONNX file (initializers excluded): name -> dims (``InputDims``).

    A negative ``dim_value`` (Paddle2ONNX writes ``-1``) is dynamic, as in ONNX and TensorRT's parser.

    Reads only the graph's input and initializer-name fields from a memory map, skipping the weights, so it costs
    little even for a 2 GB model. Raises ``UserInputError`` when the file is not an ONNX model.
    """
    return _mapped(path, lambda buf: {vi.name: _dims(vi) for vi in _graph(buf, nodes=False)[0]})


def onnx_graph(path: str | Path) -> tuple[list[onnx.ValueInfoProto], list[onnx.NodeProto]]:
    """The graph inputs (initializers excluded) and nodes of an ONNX file, read from a memory map.

    The weights are skipped. Raises ``UserInputError`` when the file is not an ONNX model.
    """
    return _mapped(path, lambda buf: _graph(buf, nodes=True))
