"""Compare a plan's outputs with the FP32 ONNX at each profile's min/opt/max shapes (runner-agnostic).

The GPU worker feeds TensorRT's outputs here; the figures and thresholds are the precision gate's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from trtfarm.precision.gate import OutputFigures, figure_failures, output_figures
from trtfarm.precision.inputs import inputs_for_shapes as generated_inputs
from trtfarm.precision.output_meaning import OutputMeaning
from trtfarm.precision.recipe import Recipe
from trtfarm.profiles.profile import Profile


def profile_points(profile: Profile) -> list[tuple[str, dict[str, list[int]]]]:
    """The shapes to validate a profile at: min, opt and max."""
    return [(point, {name: getattr(r, point) for name, r in profile.root.items()}) for point in ("min", "opt", "max")]


def fit_to_shape(data: np.ndarray, shape: list[int]) -> np.ndarray:
    """Held-out samples cut or zero-padded (mask 0, id 0) to ``shape``; rows repeat when there are too few."""
    rows = np.resize(np.arange(len(data)), shape[0])
    out = np.zeros(shape, dtype=data.dtype)
    src = data[rows]
    region = tuple(slice(0, min(a, b)) for a, b in zip(shape, src.shape, strict=True))
    out[region] = src[region]
    return out


def inputs_for_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]], seed: int = 0,
                      heldout: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Held-out samples fitted to these shapes when given; otherwise generated inputs of exactly these shapes."""
    if heldout:
        return {name: fit_to_shape(heldout[name], shapes[name]) for name in shapes}
    return generated_inputs(model, shapes, seed)


@dataclass
class PointComparison:
    """The comparison at one shape of one profile."""

    profile: int
    point: str
    shapes: dict[str, list[int]]
    figures: list[OutputFigures]
    failures: list[str] = field(default_factory=list)


def compare_point(profile: int, point: str, shapes: dict, reference: dict[str, np.ndarray],
                  candidate: dict[str, np.ndarray], recipe: Recipe,
                  meanings: dict[str, OutputMeaning] | None = None) -> PointComparison:
    """Figures per output of ``candidate`` (the plan) against ``reference`` (FP32 onnxruntime).

    ``meanings``: what the FP32 graph says each output is (``output_meanings``), so the plan's outputs are judged
    by the same kinds and figures as the precision gate's.
    """
    meanings = meanings or {}
    figs = [output_figures(name, np.asarray(reference[name], np.float32), np.asarray(candidate[name], np.float32),
                           recipe, meaning=meanings.get(name)) for name in reference]
    return PointComparison(profile, point, shapes, figs, figure_failures(figs, recipe))
