"""What an ONNX file says as real exporters write it: its dimensions and the files its tensors live in.

- A dimension is ``dim_value`` (an int), ``dim_param`` (a name) or unset. Paddle2ONNX and older converters write a
  dynamic dimension as ``dim_value: -1``: in ONNX and in TensorRT's parser any negative value is dynamic
  (``static_dim``). Dimensions that share a ``dim_param`` name are one symbolic size to TensorRT.
- External data: any tensor (an initializer, a sparse initializer, a ``Constant`` node's value, in the main graph
  or a subgraph) may keep its bytes in a file beside the model (``external_data`` key ``location``). Every such file
  is part of the model: its digest, its upload, its fetch. A location that leaves the model's folder is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import onnx

from trtfarm.errors import UserInputError


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
    found = set()
    for tensor in all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
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
    model = model if model is not None else onnx.load(str(path), load_external_data=False)
    files = []
    for location in external_locations(model):
        file = location_path(path, location)
        if not file.is_file():
            raise UserInputError(f"{path}: its weights live in {location!r}, which is not there ({file}). Fix: copy "
                                 "every external data file the model references next to it")
        files.append((location, file))
    return files
