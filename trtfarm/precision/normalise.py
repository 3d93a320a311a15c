"""What ModelOpt's converters cannot take, made right before they see the model, and said.

Every change here keeps what the model computes (onnxruntime and TensorRT's parser read the original the same way):

- IR version 3 lists every initializer as a graph input too. ModelOpt rewrites the graph (an opset upgrade, its
  sanitizer) and the result is no longer a valid IR-3 model (``W in initializer but not in graph input``). Those
  inputs are dropped, the initializers stay weights (as TensorRT and onnxruntime take them when nothing feeds them),
  and the IR version is raised to the lowest one that allows it for the model's opset. An IR-3 model without
  initializers is raised too: ModelOpt's opset upgrade adds some (Pad-2's ``pads`` attribute becomes a Pad-11
  input held as an initializer), which IR 3 must also list as graph inputs, and ModelOpt's own check then fails
  (``_v_4 in initializer but not in graph input``: PyTorch's exported Pad operators).
- From IR version 4 an input that has an initializer of the same name is an input with a default value.
  ModelOpt's graph cleanup (ONNX-GraphSurgeon) turns each into a constant and drops the input, then refuses its own
  result because the inputs changed (the sequence graphs of onnx's tests: ``pos_at``). They are taken as weights,
  as TensorRT's parser and trtfarm's generated inputs take them.
- Nodes without a name get one (``Conv_12``: op type and position), so AutoCast's rules, ``--keep-fp32`` and the
  report can name every node.
- A graph input's dimension that has neither a size nor a name (silero-vad's ``input [?, ?]``) gets a name
  (``input_dim0``): ModelOpt's quantization compares each dimension with 0 (``get_dynamic_graph_inputs``) and fails
  on one that is neither. A name says what nothing said: the dimension is dynamic.
- ``value_info`` is dropped: a dynamo export's intermediate shapes carry ``unk`` dimensions that break onnxruntime
  after AutoCast (a ModelOpt defect); ONNX shape inference gives them again.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from trtfarm.onnxfile import load_model


def _ir3_inputs(model: onnx.ModelProto) -> list[str]:
    """Notes for (and the removal of) initializers listed as graph inputs, IR version below 4 only."""
    if model.ir_version >= 4 or not model.graph.initializer:
        return []
    weights = {i.name for i in model.graph.initializer}
    listed = [i for i in model.graph.input if i.name in weights]
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    before = model.ir_version
    model.ir_version = _lowest_ir_with_weights(model)
    if not listed:
        return [f"IR version {before} with initializers that are not graph inputs (IR 4 allows that): the IR "
                f"version was raised to {model.ir_version}, as TensorRT's parser and onnxruntime read it"]
    return [f"IR version {before} lists its {len(listed)} initializers as graph inputs too: they were taken as "
            f"weights (as TensorRT and onnxruntime take them) and the IR version raised to {model.ir_version}, "
            "which ModelOpt's converters need"]


def _ir3_without_weights(model: onnx.ModelProto) -> list[str]:
    """A note for (and the raise of) the IR version of an IR-3 model that has no initializers."""
    if model.ir_version >= 4 or model.graph.initializer:
        return []
    before = model.ir_version
    model.ir_version = _lowest_ir_with_weights(model)
    return [f"IR version {before}, raised to {model.ir_version} for ModelOpt: its opset upgrade can add weights (a "
            "Pad's pads), which IR 3 would have to list as graph inputs; TensorRT's parser and onnxruntime read the "
            "model the same"]


def _lowest_ir_with_weights(model: onnx.ModelProto) -> int:
    opsets = [o for o in model.opset_import if o.domain in ("", "ai.onnx")] or list(model.opset_import)
    return max(4, onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True))


def _default_valued_inputs(model: onnx.ModelProto) -> list[str]:
    """A note for (and the removal of) graph inputs that have a default value (an initializer), IR 4 and later."""
    if model.ir_version < 4:
        return []
    weights = {i.name for i in model.graph.initializer}
    listed = [i.name for i in model.graph.input if i.name in weights]
    if not listed:
        return []
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    shown = ", ".join(listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
    return [f"{len(listed)} graph input(s) with a default value ({shown}) were taken as weights, as TensorRT's "
            "parser takes them: ModelOpt's graph cleanup cannot keep an input that has an initializer"]


def name_nodes(model: onnx.ModelProto) -> list[str]:
    """Name each unnamed node by its op type and position (``Conv_12``), as the converted model names it; a note."""
    taken = {n.name for n in model.graph.node if n.name}
    unnamed = [(i, n) for i, n in enumerate(model.graph.node) if not n.name]
    for i, node in unnamed:
        name = f"{node.op_type}_{i}"
        while name in taken:
            name += "_"
        node.name = name
        taken.add(name)
    if not unnamed:
        return []
    return [f"{len(unnamed)} of its {len(model.graph.node)} nodes had no name: each was named by op type and "
            "position (Conv_12), as the report and --keep-fp32 name them"]


def name_dimensions(model: onnx.ModelProto) -> list[str]:
    """Name each graph input's dimension that has neither a size nor a name (``input_dim1``); a note."""
    dims = [(v.name, i, d) for v in model.graph.input for i, d in enumerate(v.type.tensor_type.shape.dim)]
    taken, named = {d.dim_param for _, _, d in dims}, []
    for name, i, dim in dims:
        if not dim.HasField("dim_value") and not dim.HasField("dim_param"):
            dim.dim_param = f"{name}_dim{i}"
            while dim.dim_param in taken:  # a name of its own: it ties no other dimension
                dim.dim_param += "_"
            taken.add(dim.dim_param)
            named.append(dim.dim_param)
    if not named:
        return []
    return [f"{len(named)} input dimension(s) had neither a size nor a name ({', '.join(named[:4])}"
            f"{' and more' if len(named) > 4 else ''}): each was named, as ModelOpt's quantization needs"]


def normalised_for_converters(src: Path, dest: Path) -> tuple[Path, list[str]]:
    """Write ``src`` to ``dest`` in the form ModelOpt's converters take; return it and what was changed.

    Weights kept in external data files are read and written inline (the copy is scratch, for the converter).
    """
    model = load_model(src, weights=True)
    notes = (_ir3_inputs(model) + _ir3_without_weights(model) + _default_valued_inputs(model) + name_nodes(model)
             + name_dimensions(model))
    del model.graph.value_info[:]
    onnx.save(model, str(dest))
    return dest, notes


def normalised_for_checker(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model as ``onnx.checker`` judges it once IR-3 initializer inputs are read as TensorRT reads them.

    An IR-3 model whose initializers are not all graph inputs (onnxruntime's own ``mul_1.onnx``) fails the checker,
    though TensorRT's parser and onnxruntime load it. The IR version is raised in a copy for the check only.
    """
    if model.ir_version >= 4 or not model.graph.initializer:
        return model, []
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, _ir3_inputs(copy)
