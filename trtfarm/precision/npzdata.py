"""Real inputs for calibration and the gate: an ``.npz`` keyed by input name, checked against the model.

A batched input (``inputs.batch_axes``) holds its samples along its batch axis; any other input (a rank-0 scalar
included) holds one value of its own shape, given with every batch. Wrong names, ranks, sample counts or fixed
dimensions are refused in one line with the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from trtfarm.errors import UserInputError
from trtfarm.precision.inputs import batch_axes, model_inputs


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
