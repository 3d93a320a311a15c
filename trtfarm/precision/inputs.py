"""Model inputs for calibration and the gate: ``.npz`` files checked against the model, or generated ones.

Generated inputs follow the model's own shape rules, as the export wrote them:

- samples run along the batch axis: the first dimension the inputs share (a name, or a fixed batch); an input
  without it (a rank-0 scalar such as an audio model's sample rate, a rank-1 table) is one value given with every
  batch, in an ``.npz`` too;
- dimensions that share a name share a size; a name that is an expression of others (``past_sequence_length +
  sequence_length``, as a decoder's mask is written) gets that size; a dimension named once, by no rule, is
  tried as the other sizes the graph names (a decoder's ``present`` length) in a one-row onnxruntime run;
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
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from trtfarm.errors import UserInputError
from trtfarm.onnxfile import dim_label, dim_names, dim_size, is_expression, shape_tensor_inputs
from trtfarm.precision.domains import index_bound, non_negative_inputs
from trtfarm.precision.recipe import clip

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


def load_npz(path: Path, model: onnx.ModelProto, what: str) -> dict[str, np.ndarray]:
    """Read an ``.npz`` keyed by input name; refuse wrong names, ranks or fixed dimensions with the fix.

    A batched input holds its samples along its batch axis (``batch_axes``: axis 0, or where a recurrent state
    names the batch); any other input (a rank-0 scalar included) holds one value of its own shape, given with
    every batch.
    """
    fix = "write it with numpy.savez(path, **inputs): one numeric array per input name, samples along the batch axis"
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array: no input names
            raise UserInputError(f"{path}: {what} is a single .npy array, not an .npz keyed by input name; {fix}")
        with loaded as npz:
            data = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError) as err:
        raise UserInputError(f"{path}: cannot read {what} ({err}); {fix}") from err
    spec, rows = model_inputs(model), batch_axes(model)
    _check_arrays(path, what, data, rows, fix)
    unknown, missing = sorted(set(data) - set(spec)), sorted(set(spec) - set(data))
    if unknown or missing:
        detail = (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
        raise UserInputError(f"{path}: {what} keys {sorted(data)} do not match the model's inputs "
                             f"{sorted(spec)}{detail}")
    for name, arr in data.items():
        dtype, dims = spec[name]
        if arr.ndim != len(dims):
            one = "" if name in rows else " (one value given with every batch: a scalar is shape [])"
            raise UserInputError(f"{path}: {what} input {name!r} has shape {list(arr.shape)}, the model takes rank "
                                 f"{len(dims)} ({dims}){one}")
        axis = rows.get(name)
        if axis == 0 and isinstance(dims[0], int) and dims[0] > 0 and arr.shape[0] % dims[0]:
            raise UserInputError(f"{path}: {what} input {name!r} has {arr.shape[0]} rows; the model takes batches "
                                 f"of {dims[0]}, so give a multiple of {dims[0]} rows (samples run along axis 0)")
        fixed = [(i, d) for i, d in enumerate(dims) if i != axis and isinstance(d, int) and d >= 0
                 and arr.shape[i] != d]
        if fixed:
            raise UserInputError(f"{path}: {what} input {name!r} has shape {list(arr.shape)}; dimension "
                                 f"{fixed[0][0]} must be {fixed[0][1]}")
        data[name] = arr.astype(dtype, copy=False)
    return data


def _check_arrays(path: Path, what: str, data: dict[str, np.ndarray], rows: dict[str, int], fix: str) -> None:
    """Numbers only, at least one sample, and one sample count for every batched input."""
    for name, arr in data.items():
        if arr.dtype.kind not in "biuf":
            raise UserInputError(f"{path}: {what} input {name!r} holds {arr.dtype} values, not numbers; {fix}")
        if name in rows and (arr.ndim <= rows[name] or arr.shape[rows[name]] == 0):
            raise UserInputError(f"{path}: {what} input {name!r} has no samples (shape {list(arr.shape)}); {fix}")
    counts = {name: arr.shape[rows[name]] for name, arr in data.items() if name in rows}
    if len(set(counts.values())) > 1:
        raise UserInputError(f"{path}: {what} inputs disagree on the number of samples along the batch axis "
                             f"({counts}); give every batched input the same number of samples")


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


def generated_inputs(model: onnx.ModelProto, samples: int = 64, seq: int = 64, seed: int = 0,
                     sizes: dict[str, int] | None = None, path: str = "the model",
                     fits: tuple[int, str] | None = None) -> Generated:
    """``samples`` rows of generated inputs (fewer for large inputs: at most ``MAX_GENERATED_VALUES`` values).

    ``sizes``: the named dimensions' sizes (``symbol_sizes``, or what the probe found); dynamic dimensions get
    ``seq`` by default. ``fits``: the most samples the memory budget holds, and why (``memory.MemoryPlan``).
    """
    _refuse_shape_tensors(model, path)
    spec, rows_of = model_inputs(model), batch_axes(model)
    sizes = dict(sizes) if sizes is not None else symbol_sizes(model, seq)[0]
    one = sample_shapes(model, sizes, 1, path)
    per_sample = sum(int(np.prod(s)) for n, s in one.items() if n in rows_of) or 1
    fixed = fixed_batch(model) or 1
    wanted = samples - samples % fixed or fixed
    by_values = MAX_GENERATED_VALUES // per_sample // fixed * fixed
    by_runs = MAX_RUNS * (fixed if fixed_batch(model) else 16)
    count = max(MIN_SAMPLES * fixed, min(wanted, by_values, by_runs))
    notes = []
    if count < wanted:
        why = (f"one sample holds {per_sample:,} values, and the step keeps to {MAX_GENERATED_VALUES:,} per input set"
               if by_values <= by_runs else f"the export fixes its batch at {fixed}, and the step keeps to {MAX_RUNS} "
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


def probe_sizes(model: onnx.ModelProto, run, seq: int = 64, path: str = "the model",
                notes: list[str] | None = None) -> dict[str, int]:
    """Sizes that onnxruntime runs the model with: one row through ``run(feed)`` per candidate, the first that runs.

    ``run`` raises on failure. A dimension named once is tried as the common size, then as each size the graph's
    outputs name. When onnxruntime reports an index out of range (positions past + current beyond a position
    table's rows), the common size is halved until it runs, and ``notes`` says so. When none runs,
    ``UserInputError`` names the input and asks for real data.
    """
    tries = [seq] + [s for s in (seq // 2, seq // 4, seq // 8, seq // 16) if s >= 4]
    for size in tries:
        try:
            found = _probe(model, run, size, path)
            break
        except UserInputError as err:  # only an index out of range is worth shorter lengths
            if size == tries[-1] or not re.search(r"out of (data )?(bounds|range)", str(err), re.I):
                raise
    if size < seq and notes is not None:
        notes.append(f"dynamic dimensions sized {size}, not {seq}: at larger sizes onnxruntime reported an index "
                     "out of range (positions past a position table's rows)")
    return found


def _probe(model: onnx.ModelProto, run, seq: int, path: str) -> dict[str, int]:
    sizes, lone = symbol_sizes(model, seq)
    trials = [dict(sizes)]
    for _, _, label in lone:
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
