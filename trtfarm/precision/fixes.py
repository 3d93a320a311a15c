"""A failed gate's way forward: the failing outputs, the costliest layers, and commands that would fix it.

Each command gives the user's recipe again (``recipe_options``), so a printed fix changes only what it fixes;
``tests/precision/test_printed_fixes.py`` runs every printed command to a verdict.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from trtfarm.precision.figures import figure_failures
from trtfarm.precision.gate import GateReport
from trtfarm.precision.recipe import Recipe


def way_forward(src: Path, recipe: Recipe, report: GateReport, **data: Path | None) -> dict:
    """A failed gate's fix: its failing outputs, its costliest layers, and the two commands that would fix it.

    ``data``: the calibration and held-out files the step was given (the commands give them again).
    """
    if report.passed is not False:
        return {}
    layers = [d["node"] for d in report.diverging_nodes]
    base = ["trtfarm", "precision", str(src), "--mode", recipe.mode,
            *(x for what, path in data.items() if path for x in (f"--{what}", str(path))), *recipe_options(recipe)]
    keep = "^(" + "|".join(re.escape(n) for n in layers) + ")$" if layers else ""
    pins = [x for p in recipe.keep_fp32 for x in ("--keep-fp32", p)]
    return {"failing_outputs": [f.output for f in report.figures if figure_failures([f], recipe)],
            "costliest_layers": layers, "auto_pin": shlex.join([*base, *pins, "--auto-pin"]),
            "keep_fp32": shlex.join([*base, *pins, "--keep-fp32", keep]) if keep else ""}


def recipe_options(recipe: Recipe) -> list[str]:
    """The options of ``trtfarm precision`` that give ``recipe`` again, so a printed fix keeps what the user chose.

    Its op types kept in FP32, AutoCast limit, task, output ranges and error limit (``keep_fp32`` is the caller's).
    """
    out = [x for op in recipe.keep_fp32_ops for x in ("--keep-fp32-op", op)]
    if recipe.data_max != Recipe.model_fields["data_max"].default:
        out += ["--data-max", f"{recipe.data_max:g}"]
    if recipe.task != "generic":
        out += ["--task", recipe.task]
    out += [x for name, (low, high) in recipe.output_ranges.items()
            for x in ("--output-range", f"{name}={low:g}:{high:g}")]
    if recipe.thresholds is not None and "max_error" in recipe.thresholds.model_fields_set:
        out += ["--max-error", f"{recipe.thresholds.max_error:g}"]
    return out
