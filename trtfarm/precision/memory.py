"""How many samples the precision step may hold within a memory budget (``--max-memory``, default 4 GiB).

A sample costs its inputs, its outputs (the FP32 reference's and the converted model's, per batch and joined) and,
at the step's peak, its activations: AutoCast's reference run and the layer-wise search mark every tensor as an
output, and onnxruntime's own buffers sit beside them. The activations per sample are the intermediate tensors'
sizes that ONNX shape inference gives for one sample's shapes. Not every sample's activations are held at once
where the step says so (``held``): AutoCast's reference run takes the gate's first few batches only, and the
layer-wise search one; a calibration run holds every batch's. The process itself (Python, onnxruntime, ModelOpt)
and the model's weights, loaded by each session, are taken from the budget first. Tensors computed from weights
alone (the ONNX test zoo's nets make theirs with ``ConstantOfShape``) are made once a run and held with every
tensor of each batch AutoCast keeps: they are counted with a sample's activations, an upper bound, but never named
as a sample's largest tensor. When not even one sample fits, the step refuses in one line before it allocates
anything large.
"""

from __future__ import annotations

import re
import resource
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from trtfarm.errors import UserInputError

DEFAULT_BUDGET = 4 << 30
LIBRARIES = 448 << 20  # the step's process with onnxruntime and ModelOpt loaded: about 400 MB on a tiny model
HELD = 2  # activation copies at the peak: every tensor as an output, beside onnxruntime's own buffers
SESSIONS = 3  # copies of the weights: the FP32 session, the converted model, ModelOpt's working copy
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4, "tib": 1 << 40}


def parse_size(text: str, option: str = "--max-memory") -> int:
    """``4GiB``, ``512MiB``, ``2G`` (binary), ``1.5GB`` (decimal) or plain bytes -> bytes; bad text: one line."""
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = found and _UNITS.get(found.group(2).lower())
    if not unit or float(found.group(1)) <= 0:
        raise UserInputError(f"{option} {text!r}: give a size such as 4GiB, 512MiB or 2G")
    return int(float(found.group(1)) * unit)


def size_text(n: float) -> str:
    """Bytes for people: ``1.5 GiB``, ``320 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


@dataclass
class MemoryPlan:
    """What the step may hold: the budget, what the process and weights take, and what one sample costs."""

    budget: int
    fixed: int
    per_sample: int
    activations: int  # per sample, of per_sample
    largest: str = ""  # the largest intermediate tensor of one sample, for the refusal
    held: int | None = None  # the most samples whose activations are held at once (None: every sample's)

    @property
    def samples(self) -> int:
        """The most samples that fit (0: not even one); past ``held`` a sample costs its inputs and outputs only."""
        left, whole = max(0, self.budget - self.fixed), max(1, self.per_sample)
        if self.held is None or left < whole * self.held:
            return left // whole
        return self.held + (left - whole * self.held) // max(1, self.per_sample - HELD * self.activations)

    def why(self) -> str:
        """``one sample needs about 72 MiB in the precision step (36 MiB of activations) and 576 MiB of ...``."""
        held = f", held for at most {self.held} samples at once" if self.held else ""
        return (f"one sample needs about {size_text(self.per_sample)} in the precision step "
                f"({size_text(self.activations)} of activations{held}) and "
                f"{size_text(max(0, self.budget - self.fixed))} of the {size_text(self.budget)} budget is left "
                "beside the process and the model's weights")


def rss_peak() -> int:
    """This process's peak resident memory so far, in bytes: Linux's ``VmHWM``, the peak of its own address space.

    Not ``ru_maxrss`` where ``VmHWM`` is there: a process started by fork and exec reports its parent's peak in it
    (a farm worker's, a notebook's, a bench's), and the step would take that from its budget.
    """
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB, as Linux reports it


def plan_memory(model: onnx.ModelProto, shapes: dict[str, list[int]], rows: int, budget: int,
                path: str = "the model", weights: int = 0, held: int | None = None) -> MemoryPlan:
    """The plan for one run of ``rows`` samples of these ``shapes``; ``UserInputError`` when one sample does not fit.

    ``weights``: the model's weight bytes (external data included) when the caller knows them. ``held``: the most
    samples whose every tensor the step holds at once (None: every sample's, as a calibration run holds them).
    """
    acts, outs, largest = tensor_bytes(model, shapes)
    inputs = sum(int(np.prod(s)) * 4 for s in shapes.values())
    rows = max(1, rows)
    weights = weights or sum(int(np.prod(i.dims)) * 4 for i in model.graph.initializer)
    plan = MemoryPlan(budget, max(rss_peak(), LIBRARIES) + SESSIONS * weights,
                      (inputs + 4 * outs + HELD * acts) // rows, acts // rows, largest, held)
    if plan.samples < 1:
        need = plan.fixed + plan.per_sample * 2
        raise UserInputError(f"{path}: not even one sample fits the memory budget: {plan.why()}; the largest tensor "
                             f"is {largest}. Fix: --max-memory {-(-need // (1 << 30))}GiB, or export the model for "
                             "smaller inputs")
    return plan


def tensor_bytes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> tuple[int, int, str]:
    """Intermediate and output tensor bytes for inputs of these shapes (ONNX shape inference), and the largest.

    The largest is named among the tensors that depend on the inputs (not ``weight_tensors``). A tensor whose shape
    inference leaves unknown is counted as the largest known one.
    """
    light = _light(model, shapes)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):
        inferred = light
    constant = {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    outputs = {o.name for o in model.graph.output}
    sizes: dict[str, int | None] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        if vi.name not in constant:
            sizes[vi.name] = _bytes(vi)
    produced = list(dict.fromkeys(o for n in model.graph.node for o in n.output if o and o not in constant))
    known = [s for s in sizes.values() if s]
    top = max(known, default=sum(int(np.prod(s)) * 4 for s in shapes.values()))
    acts = sum(sizes.get(t) or top for t in produced)
    outs = sum(sizes.get(t) or top for t in outputs)
    computed = weight_tensors(model)
    name = max((t for t in produced if sizes.get(t) and t not in computed), key=lambda t: sizes[t], default="")
    return acts, outs, f"{name!r} ({size_text(sizes[name])} a sample)" if name else "unknown"


def weight_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from weights alone: outputs of nodes whose every input is a weight or such a tensor."""
    weights = {i.name for i in model.graph.initializer}
    found = set(weights)
    for node in model.graph.node:  # in graph order: a node's inputs come before it
        if all(not i or i in found for i in node.input):
            found.update(o for o in node.output if o)
    return found - weights


def _bytes(vi: onnx.ValueInfoProto) -> int | None:
    t = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    if not t.HasField("shape") or any(d < 0 for d in dims):
        return None
    try:
        size = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        size = 4
    return int(np.prod(dims, dtype=np.int64)) * size


def _light(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """The graph with these input shapes; weights of more than 64 values declared as inputs, not copied."""
    g = model.graph
    types = {i.name: i.type.tensor_type.elem_type for i in g.input}
    small = [i for i in g.initializer if int(np.prod(i.dims)) <= 64 and i.data_location != onnx.TensorProto.EXTERNAL]
    kept = {i.name for i in small}
    inputs = [helper.make_tensor_value_info(n, types.get(n, onnx.TensorProto.FLOAT), s) for n, s in shapes.items()]
    inputs += [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in g.initializer
               if i.name not in kept and i.name not in shapes]
    outputs = [helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None) for o in g.output]
    graph = helper.make_graph(list(g.node), g.name, inputs, outputs, small)
    light = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    # IR 4 at least: before it an initializer is read only where it is also a graph input, so the small weights
    # kept above would have no type, and every tensor after them no shape (an IR 3 model-zoo net: all unknown)
    light.ir_version = max(model.ir_version, 4)
    return light
