"""Planning's precision step: reuse the step the store recorded, else decide a ``PrecisionJob``; it reads only.

The step is keyed by its inputs (``precision_key``: the export, the full recipe, the calibration and held-out data).
When the store holds its record, planning reads that one object and the builds carry the step's result (the
converted ONNX's key and digest, accuracy, pinned nodes, the gate's verdict); a recorded refusal is the same
``GateFailed`` a fresh run raises. Otherwise the executor runs the job first (``building.precision_runner``) and the
model is planned again. Planning never imports ModelOpt and never writes.
"""

from __future__ import annotations

from pathlib import Path

from trtfarm import layout
from trtfarm.precision.recipe import GateFailed, Recipe
from trtfarm.store import Store
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import ResolvedTarget
from trtfarm.vocabulary.model import ModelSource, PrecisionStep
from trtfarm.vocabulary.precision_job import PrecisionJob


def planned_precision(store: Store, model: ModelSource, recipe: Recipe, calibration: Path | None,
                      heldout: Path | None, export: ExportRef,
                      lead: ResolvedTarget | None, *, max_memory: int | None = None,
                      unchecked_modelopt: bool = False) -> ModelSource | PrecisionJob:
    """``model`` with its precision step when it is known (fp32, or recorded), else the job that runs it.

    ``GateFailed`` when the recorded step's gate refused the recipe. ``lead``: the target whose worker runs the job
    on a farm. ``max_memory``: the bytes the job's step may hold (None: its default budget). ``unchecked_modelopt``:
    the job's step may run on library versions its workarounds were not compared with (``precision.library_versions``).
    """
    if recipe.mode == "fp32" and not recipe.auto_pin:  # used as exported: nothing to convert or gate
        step = PrecisionStep.as_exported(recipe, model.onnx_digest)
        return model.model_copy(update={"build_path": None, "precision": step, "heldout": heldout})
    from trtfarm.building.precision_runner import step_of  # not on an fp32 build's path (onnx.helper, numpy)
    from trtfarm.precision.step import precision_key, stored_result

    key = precision_key(recipe, model.onnx_digest, calibration, heldout)  # hashes the data files: once
    prefix = layout.converted_prefix(model.name, model.onnx_digest, key)
    found = stored_result(store, prefix, recipe, _nowhere(model))
    if found is None:
        return PrecisionJob(model=model.model_copy(update={"heldout": heldout}), export=export, recipe=recipe,
                            key=key, calibration=calibration, heldout=heldout, lead=lead, max_memory=max_memory,
                            unchecked_modelopt=unchecked_modelopt)
    result, sha256 = found
    if result.report.passed is False:
        raise GateFailed(result.summary())
    step = step_of(result, model, recipe, key, sha256)
    return model.model_copy(update={"build_path": None, "precision": step, "heldout": heldout})


def _nowhere(model: ModelSource) -> Path:
    """A path that is not the export's: the converted model is on no local disk yet (each build downloads it)."""
    return model.path.with_name(f".{model.path.name}.converted")
