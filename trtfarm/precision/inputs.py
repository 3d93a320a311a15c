"""Model inputs for calibration and the gate: the model's batch, and generated inputs (``npzdata`` reads real ones).

Generated inputs follow the model's own shape rules, as the export wrote them:

- samples run along the batch axis: the first dimension the inputs share (a name, or a fixed batch); an input
  without it (a rank-0 scalar such as an audio model's sample rate, a rank-1 table) is one value given with every
  batch, in an ``.npz`` too;
- dimensions that share a name share a size; a name that is an expression of others (``past_sequence_length +
  sequence_length``, as a decoder's mask is written) gets that size; a dimension named once, by no rule, is
  tried as the other sizes the graph names (a decoder's ``present`` length) in a one-row onnxruntime run;
- where onnxruntime refuses that run naming the shape it wants (a recurrent state that fixes the batch its features
  name: ``ties``), the run is retried once with that size, and a tied batch is the batch, at its fixed size; where
  it reports an index out of range (positions past + current beyond a position table), the lengths shrink to fit;
- integer inputs stay inside the table they index (token ids below the vocabulary, type ids below their table),
  masks are 0/1 with realistic padding, ids zero beyond it;
- float inputs are normal, except where the graph takes them (through casts and reshapes) into an operator defined
  for non-negative values only (``Sqrt``, ``Log``, ``Pow``'s base but for whole exponents): there they are the
  normal values' magnitudes,
  and a note says so (on negative inputs FP32 itself gives NaN, and the gate would judge nothing there);
- an input whose values are shapes (a shape tensor) cannot be made up: the message names it and asks for data.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from trtfarm.errors import UserInputError
from trtfarm.onnxfile import dim_label
from trtfarm.onnxshapes import dim_names, dim_size, is_expression, shape_tensor_inputs
from trtfarm.precision.domains import index_bound, non_negative_inputs
from trtfarm.precision.recipe import clip
from trtfarm.precision.ties import Tie, answer_text, tie_of

DATA_FIX = ("pass real inputs: --calibration calib.npz / --heldout heldout.npz (numpy.savez keyed by input name, "
            "samples along the batch axis)")


def model_inputs(model: onnx.ModelProto) -> dict[str, tuple[np.dtype, list]]:
    """Graph inputs (initializers excluded): name -> (numpy dtype, dims with names for dynamic ones, "?" unnamed)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d if d is not None else "?" for d in map(dim_label, t.shape.dim)]
        out[i.name] = (np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)), dims)
    return out


def batch_dim(model: onnx.ModelProto) -> int | str | None:
    """The batch: the first dimension the inputs share, a name (dynamic batch) or a size (a static export's batch).

    A name counts wherever an input carries it (a recurrent state ``[layers, batch, hidden]`` shares ``batch`` with
    its features ``[batch, time, feat]``); a fixed size or an unnamed dimension only as an input's first.
    """
    spec = [dims for _, dims in model_inputs(model).values() if dims]
    firsts = Counter(dims[0] for dims in spec)
    if not firsts:
        return None

    def reach(label) -> int:
        return sum(label in dims for dims in spec) if _named(label) else firsts[label]

    label = max(firsts, key=reach)
    return label if reach(label) > 1 or len(firsts) == 1 else None


def _named(label) -> bool:
    return isinstance(label, str) and label != "?"


def batch_axes(model: onnx.ModelProto) -> dict[str, int]:
    """Inputs that carry the batch, and the axis their samples run along there (the rest are one value)."""
    batch = batch_dim(model)
    if batch is None:
        return {}
    return {n: dims.index(batch) if _named(batch) else 0 for n, (_, dims) in model_inputs(model).items()
            if dims and (dims[0] == batch or _named(batch) and batch in dims)}


def output_axes(model: onnx.ModelProto) -> dict[str, int]:
    """Outputs that carry a named batch at an axis other than the first (a recurrent state): name -> that axis."""
    batch = batch_dim(model)
    dims = {o.name: [dim_label(d) for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    return {n: d.index(batch) for n, d in dims.items() if _named(batch) and batch in d and d.index(batch) > 0}


def batched(model: onnx.ModelProto) -> set[str]:
    """Inputs that carry the batch: their samples run along its axis (``batch_axes``); the rest are one value."""
    return set(batch_axes(model))


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The batch size every batched input fixes in its first dimension (a static export), or None when dynamic."""
    batch = batch_dim(model)
    return batch if isinstance(batch, int) and batch > 0 else None


# --- generated inputs ------------------------------------------------------------------------------------------

@dataclass
class Generated:
    """Generated samples: arrays by input name, the inputs given whole with every batch, and what was decided."""

    data: dict[str, np.ndarray]
    unbatched: set[str] = field(default_factory=set)
    axes: dict[str, int] = field(default_factory=dict)  # the batched inputs' batch axes (``batch_axes``)
    sizes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _shape(dims: list, sizes: dict[str, int], rows: int, axis: int | None) -> list[int] | None:
    shape = []
    for i, d in enumerate(dims):
        if i == axis:
            shape.append(rows)
        elif isinstance(d, int) and d >= 0:
            shape.append(d)
        else:
            size = dim_size(d, sizes) if d != "?" else sizes.get("?")
            if size is None:
                return None
            shape.append(size)
    return shape


def symbol_sizes(model: onnx.ModelProto, seq: int) -> tuple[dict[str, int], list[tuple[str, int, str]]]:
    """Sizes for the named dimensions, and the lone ones: ``(input, axis, name)`` named once, by no rule."""
    batch, axes = batch_dim(model), batch_axes(model)
    uses: dict[str, list[tuple[str, int]]] = {}
    for name, (_, dims) in model_inputs(model).items():
        for axis, d in enumerate(dims):
            if isinstance(d, str) and axis != axes.get(name):  # an unnamed batch's '?' elsewhere: a size as others
                uses.setdefault(d, []).append((name, axis))
    sizes = {d: seq for d in uses if not is_expression(d)}
    for d in [d for d in uses if d not in sizes]:  # expressions: their names get the common size
        sizes.update({n: seq for n in dim_names(d) if n not in sizes and n != batch})
    lone = [(u[0][0], u[0][1], d) for d, u in uses.items() if len(u) == 1 and not is_expression(d) and d != "?"
            and d != batch
            and not any(d in dim_names(o) for o in uses if o != d)]
    return sizes, lone


def _candidates(model: onnx.ModelProto, sizes: dict[str, int], lone: str) -> list[int]:
    """Sizes to try for a dimension named once: the common size, then each size the graph's outputs name."""
    found = [sizes[lone]]
    for vi in list(model.graph.output) + list(model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and lone not in dim_names(d.dim_param):
                size = dim_size(d.dim_param, sizes)
                if size is not None and size > 0 and size not in found:
                    found.append(size)
    return found[:8]


def inputs_for_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]],
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of exactly these shapes with realistic structure.

    One set of padding lengths per batch (so masks and ids agree): masks of varied lengths, ids inside the table
    they index and zero beyond each length, normal floats (their magnitudes where an op takes only x >= 0:
    ``non_negative_inputs``); other integers are 1 (a count, a size, a rate).
    """
    rng = np.random.default_rng(seed)
    positive = non_negative_inputs(model, [n for n, (t, _) in model_inputs(model).items() if t.kind == "f"])
    two_d = next((s for s in shapes.values() if len(s) == 2 and s[1] > 0), None)
    lengths = rng.integers(max(1, two_d[1] // 8), two_d[1] + 1, two_d[0]) if two_d else None
    out = {}
    for name, (dtype, _) in model_inputs(model).items():
        shape = shapes[name]
        padded = lengths is not None and len(shape) == 2 and shape == two_d
        if dtype.kind in "iub" and "mask" in name.lower():
            if padded:
                out[name] = (np.arange(shape[1])[None, :] < lengths[:, None]).astype(dtype)
            else:
                out[name] = np.ones(shape, dtype)
        elif dtype.kind in "iu":
            bound = index_bound(model, name)
            arr = rng.integers(0, bound, shape) if bound else np.ones(shape, np.int64)
            if padded and bound:
                arr[np.arange(shape[1])[None, :] >= lengths[:, None]] = 0
            out[name] = arr.astype(dtype)
        elif dtype.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(dtype)
        elif name in positive:
            out[name] = np.abs(rng.standard_normal(shape)).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


MAX_GENERATED_VALUES = 1 << 22  # per input set: 16 MiB of float32; a static 800x608 image gets 2 samples
MIN_SAMPLES = 2
MAX_RUNS = 8  # batches per model run: a static batch-1 export gets 8 samples, not 64 runs of one


def _refuse_shape_tensors(model: onnx.ModelProto, path: str) -> None:
    weights = {i.name for i in model.graph.initializer}
    shapes = shape_tensor_inputs([i for i in model.graph.input if i.name not in weights], list(model.graph.node))
    if shapes:
        named = "; ".join(f"{n!r} is {what}" for n, what in list(shapes.items())[:3]) + \
            (f" (and {len(shapes) - 3} more)" if len(shapes) > 3 else "")
        raise UserInputError(f"{path}: cannot generate inputs for the precision step: {named}, a shape tensor whose "
                             f"values decide the model's shapes, and trtfarm does not guess them. Fix: {DATA_FIX}")


def generate_inputs(model: onnx.ModelProto, samples: int = 64, seq: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    """``generated_inputs``' arrays alone (for tests and scripts that write an ``.npz``)."""
    return generated_inputs(model, samples, seq, seed).data


def sample_shapes(model: onnx.ModelProto, sizes: dict[str, int], rows: int = 1,
                  path: str = "the model") -> dict[str, list[int]]:
    """Every input's shape for ``rows`` samples, the named dimensions given ``sizes``; unsizable: one line."""
    axes = batch_axes(model)
    shapes = {n: _shape(dims, sizes, rows, axes.get(n)) for n, (_, dims) in model_inputs(model).items()}
    unknown = [n for n, s in shapes.items() if s is None]
    if unknown:
        raise UserInputError(f"{path}: cannot size input(s) {unknown}: their dimension names follow no rule trtfarm "
                             f"can evaluate. Fix: {DATA_FIX}")
    return shapes


def tied_batch(model: onnx.ModelProto, tie: Tie | None) -> tuple[dict[str, int], int] | None:
    """The batch a tie makes (``ties``): the batched inputs' axes and the rows a feed holds; None off the batch.

    The inputs that carry the tied symbol and the input that fixes it, at their axes; a feed holds the fixed size.
    On the batch: the model's batch, or, where the inputs share none, what a recurrent state ties (a GRU's
    ``initial_h`` ``[2, 1, 96]`` fixes the batch of its features ``[frames, batch, feat]`` at 1), or a symbol that is
    an input's first dimension.
    """
    spec = model_inputs(model)
    batch = batch_dim(model)
    if tie is None or not (tie.symbol == batch or batch is None and (
            tie.recurrent or any(d and d[0] == tie.symbol for _, d in spec.values()))):
        return None
    axes = {n: dims.index(tie.symbol) for n, (_, dims) in spec.items() if tie.symbol in dims}
    if tie.fixed and tie.input in spec:
        axes[tie.input] = tie.axis
    return axes, tie.size


def generated_inputs(model: onnx.ModelProto, samples: int = 64, seq: int = 64, seed: int = 0,
                     sizes: dict[str, int] | None = None, path: str = "the model",
                     fits: tuple[int, str] | None = None,
                     batch: tuple[dict[str, int], int] | None = None) -> Generated:
    """``samples`` rows of generated inputs (fewer for large inputs: at most ``MAX_GENERATED_VALUES`` values).

    ``sizes``: the named dimensions' sizes (``symbol_sizes``, or what the probe found); dynamic dimensions get
    ``seq`` by default. ``fits``: the most samples the memory budget holds, and why (``memory.MemoryPlan``).
    ``batch``: the batched inputs' axes and the rows a feed holds, where a tie fixed them (``tied_batch``).
    """
    _refuse_shape_tensors(model, path)
    spec = model_inputs(model)
    rows_of, static = batch or (batch_axes(model), fixed_batch(model))
    sizes = dict(sizes) if sizes is not None else symbol_sizes(model, seq)[0]
    one = sample_shapes(model, sizes, 1, path)
    per_sample = sum(int(np.prod(s)) for n, s in one.items() if n in rows_of) or 1
    fixed = static or 1
    wanted = samples - samples % fixed or fixed
    by_values = MAX_GENERATED_VALUES // per_sample // fixed * fixed
    by_runs = MAX_RUNS * (fixed if static else 16)
    count = max(MIN_SAMPLES * fixed, min(wanted, by_values, by_runs))
    notes = []
    if count < wanted:
        why = (f"one sample holds {per_sample:,} values, and the step keeps to {MAX_GENERATED_VALUES:,} per input set"
               if by_values <= by_runs else f"the model fixes its batch at {fixed}, and the step keeps to {MAX_RUNS} "
               "runs of each model")
        notes.append(f"generated {count} samples instead of {wanted}: {why}")
    if fits and count > max(fits[0], fixed):
        count = max(fixed, fits[0] // fixed * fixed)
        notes[:] = [f"generated {count} samples instead of {wanted}: {fits[1]}"]
    shapes = {n: _shape(spec[n][1], sizes, count, rows_of.get(n)) for n in spec}
    notes += [f"generated input {n!r} as the magnitudes of normal values (x >= 0): the graph takes it into {op}, "
              "which is defined for x >= 0 only" for n, op in
              non_negative_inputs(model, [n for n in spec if spec[n][0].kind == "f"]).items()]
    return Generated(inputs_for_shapes(model, shapes, seed), set(spec) - set(rows_of), axes=rows_of, sizes=sizes,
                     notes=notes)


def batches(data: dict[str, np.ndarray], size: int = 16, unbatched: set[str] = frozenset(),
            axes: dict[str, int] | None = None) -> list[dict]:
    """Split samples into feed dicts of ``size`` rows; ``unbatched`` inputs go whole into each.

    Samples run along each input's ``axes`` entry (``batch_axes``: a recurrent state's batch is its axis 1),
    else along the first axis.
    """
    axes = axes or {}
    rows = [k for k in data if k not in unbatched]
    if not rows:
        return [dict(data)]

    def part(k: str, v: np.ndarray, i: int) -> np.ndarray:
        return v if k in unbatched else v[(slice(None),) * axes.get(k, 0) + (slice(i, i + size),)]

    n = data[rows[0]].shape[axes.get(rows[0], 0)]
    return [{k: part(k, v, i) for k, v in data.items()} for i in range(0, n, size)]


@dataclass
class Probed:
    """What the one-row runs found: the named dimensions' sizes, and the tie onnxruntime's answer made (or None)."""

    sizes: dict[str, int]
    tie: Tie | None = None


def probe_sizes(model: onnx.ModelProto, run, seq: int = 64, path: str = "the model",
                notes: list[str] | None = None) -> dict[str, int]:
    """``probe``'s sizes alone."""
    return probe(model, run, seq, path, notes).sizes


def probe(model: onnx.ModelProto, run, seq: int = 64, path: str = "the model",
          notes: list[str] | None = None) -> Probed:
    """Sizes that onnxruntime runs the model with: one row through ``run(feed)`` per candidate, the first that runs.

    ``run`` raises on failure. A dimension named once is tried as the common size, then as each size the graph's
    outputs name. When onnxruntime names the shape it wants (an input that fixes a dimension a symbolic one meets:
    ``ties``), the step retries once with that size, and ``notes`` says so. When it reports an index out of range
    (positions past + current beyond a position table's rows), the common size is halved, or cut to the rows the
    message names, until it runs, and ``notes`` says so. When none runs, ``UserInputError`` names the input and asks
    for real data.
    """
    size, forced, tie, table = seq, {}, None, "'s"
    while True:
        try:
            found = _probe(model, run, size, path, forced)
            break
        except UserInputError as err:
            said = answer_text(err)
            if tie is None and (tie := tie_of(model, {**symbol_sizes(model, size)[0], **forced}, said)):
                forced[tie.symbol] = tie.size
                continue
            if size <= 1 or not re.search(r"out of (data )?(bounds|range)", said, re.I):
                raise  # only an index out of range is worth shorter lengths
            rows = re.search(r"inclusive range \[-(\d+),", said)
            table = f" of {rows.group(1)}" if rows else table
            size = max(1, min(size // 2, int(rows.group(1)) if rows else size))
    if notes is not None:
        notes += [tie.note()] if tie else []
        if size < seq:
            notes.append(f"dynamic dimensions sized {size}, not {seq}: at larger sizes onnxruntime reported an index "
                         f"out of range (positions past + current beyond a position table{table} rows)")
    return Probed(found, tie)


def _probe(model: onnx.ModelProto, run, seq: int, path: str, forced: dict[str, int]) -> dict[str, int]:
    sizes, lone = symbol_sizes(model, seq)
    sizes.update(forced)
    trials = [dict(sizes)]
    for _, _, label in (x for x in lone if x[2] not in forced):
        for size in _candidates(model, sizes, label)[1:]:
            trials.append({**sizes, label: size})
    error = None
    for trial in trials:
        made = generated_inputs(model, samples=1, seed=1, sizes=trial, path=path)
        feed = batches(made.data, fixed_batch(model) or 1, made.unbatched, made.axes)[0]
        try:
            run(feed)
            return trial
        except UserInputError as err:
            error = error or err
    where = "; ".join(f"input {n!r} dimension {a} is named {label!r} by no other input and by no rule"
                      for n, a, label in lone)
    raise UserInputError(f"{path}: onnxruntime cannot run the model on generated inputs ({_reason(error)})"
                         f"{'; ' + where if where else ''}. Fix: {DATA_FIX}") from error


def _reason(err: Exception | None) -> str:
    """The reason inside ``err``'s parentheses (the gate run's error), without the fix it gives its own reader."""
    text = str(err or "").split(". Fix: ", 1)[0]
    return clip(text.split("(", 1)[1].rsplit(")", 1)[0] if "(" in text else text)
