"""Model inputs for calibration and the gate: ``.npz`` files checked against the model, or generated ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from trtfarm.errors import UserInputError
from trtfarm.onnxfile import dim_label


def model_inputs(model: onnx.ModelProto) -> dict[str, tuple[np.dtype, list]]:
    """Graph inputs (initializers excluded): name -> (numpy dtype, dims with names for dynamic ones)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d if d is not None else "?" for d in map(dim_label, t.shape.dim)]
        out[i.name] = (np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)), dims)
    return out


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The batch size every input fixes in its first dimension (a static export), or None when it is dynamic."""
    firsts = {dims[0] if dims and isinstance(dims[0], int) else None for _, dims in model_inputs(model).values()}
    return firsts.pop() if len(firsts) == 1 else None


def load_npz(path: Path, model: onnx.ModelProto, what: str) -> dict[str, np.ndarray]:
    """Read an ``.npz`` keyed by input name; refuse wrong names, ranks or fixed dimensions with the fix."""
    fix = "write it with numpy.savez(path, **inputs): one numeric array per input name, samples along axis 0"
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array: no input names
            raise UserInputError(f"{path}: {what} is a single .npy array, not an .npz keyed by input name; {fix}")
        with loaded as npz:
            data = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError) as err:
        raise UserInputError(f"{path}: cannot read {what} ({err}); {fix}") from err
    _check_arrays(path, what, data, fix)
    spec = model_inputs(model)
    unknown, missing = sorted(set(data) - set(spec)), sorted(set(spec) - set(data))
    if unknown or missing:
        detail = (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
        raise UserInputError(f"{path}: {what} keys {sorted(data)} do not match the model's inputs "
                             f"{sorted(spec)}{detail}")
    for name, arr in data.items():
        dtype, dims = spec[name]
        if arr.ndim != len(dims):
            raise UserInputError(f"{path}: {what} input {name!r} has shape {list(arr.shape)}, the model takes rank "
                                 f"{len(dims)} ({dims})")
        if dims and isinstance(dims[0], int) and dims[0] > 0 and arr.shape[0] % dims[0]:
            raise UserInputError(f"{path}: {what} input {name!r} has {arr.shape[0]} rows; the model takes batches "
                                 f"of {dims[0]}, so give a multiple of {dims[0]} rows (samples run along axis 0)")
        fixed = [(i, d) for i, d in enumerate(dims) if i and isinstance(d, int) and d > 0 and arr.shape[i] != d]
        if fixed:
            raise UserInputError(f"{path}: {what} input {name!r} has shape {list(arr.shape)}; dimension "
                                 f"{fixed[0][0]} must be {fixed[0][1]}")
        data[name] = arr.astype(dtype, copy=False)
    return data


def _check_arrays(path: Path, what: str, data: dict[str, np.ndarray], fix: str) -> None:
    """Numbers only, at least one sample, and one sample count for every input."""
    for name, arr in data.items():
        if arr.dtype.kind not in "biuf":
            raise UserInputError(f"{path}: {what} input {name!r} holds {arr.dtype} values, not numbers; {fix}")
        if arr.ndim == 0 or arr.shape[0] == 0:
            raise UserInputError(f"{path}: {what} input {name!r} has no samples (shape {list(arr.shape)}); {fix}")
    rows = {name: arr.shape[0] for name, arr in data.items()}
    if len(set(rows.values())) > 1:
        raise UserInputError(f"{path}: {what} inputs disagree on the number of samples along axis 0 ({rows}); "
                             "give every input the same number of rows")


def _vocab_size(model: onnx.ModelProto, name: str) -> int:
    """For token ids: the row count of the embedding table a Gather reads with them."""
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name and node.input[0] in inits:
            return int(inits[node.input[0]].dims[0])
    return 100


def inputs_for_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]],
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of exactly these shapes with realistic structure.

    One set of padding lengths per batch (so masks and ids agree): masks of varied lengths, ids in the vocabulary
    and zero beyond each length, normal floats.
    """
    rng = np.random.default_rng(seed)
    two_d = next((s for s in shapes.values() if len(s) == 2), None)
    lengths = rng.integers(max(1, two_d[1] // 8), two_d[1] + 1, two_d[0]) if two_d else None
    out = {}
    for name, (dtype, _) in model_inputs(model).items():
        shape = shapes[name]
        padded = lengths is not None and len(shape) == 2 and shape == two_d
        if np.issubdtype(dtype, np.integer) and "mask" in name.lower() and padded:
            out[name] = (np.arange(shape[1])[None, :] < lengths[:, None]).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            arr = rng.integers(0, _vocab_size(model, name), shape)
            if padded:
                arr[np.arange(shape[1])[None, :] >= lengths[:, None]] = 0
            out[name] = arr.astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


MAX_GENERATED_VALUES = 1 << 24  # per input: 64 MiB of float32, so a static 416x416 image model gets 32 samples


def generate_inputs(model: onnx.ModelProto, samples: int = 64, seq: int = 64,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """``samples`` rows of generated inputs, dynamic dimensions after the batch set to ``seq``.

    The rows run along the first axis; an input whose other dimensions are large gets fewer rows (at most
    ``MAX_GENERATED_VALUES`` values per input, at least 8 rows).
    """
    spec = model_inputs(model)
    rows = {name: [d if isinstance(d, int) and d > 0 else seq for d in dims[1:]] for name, (_, dims) in spec.items()}
    largest = max((int(np.prod(r)) for r in rows.values()), default=1)
    samples = max(8, min(samples, MAX_GENERATED_VALUES // max(largest, 1)))
    return inputs_for_shapes(model, {name: [samples, *r] for name, r in rows.items()}, seed)


def batches(data: dict[str, np.ndarray], size: int = 16) -> list[dict[str, np.ndarray]]:
    """Split samples (first axis) into feed dicts of ``size`` rows (a model with a fixed batch: that batch)."""
    n = len(next(iter(data.values())))
    return [{k: v[i:i + size] for k, v in data.items()} for i in range(0, n, size)]
