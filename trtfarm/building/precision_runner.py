"""Run one ``PrecisionJob``: convert, gate and record the step in the store, before the builds that wait for it.

The executor calls ``run_precision`` (in ``trtfarm build``'s process, or in a farm child on a worker of the model's
first target); planning never converts. ``step_of`` turns a step's result into the ``PrecisionStep`` the build jobs
carry: planning uses it for a step the store holds already, the job for one it ran.
"""

from __future__ import annotations

from pathlib import Path

from trtfarm import layout
from trtfarm.cachedir import work_dir
from trtfarm.identity import sha256_file
from trtfarm.precision.recipe import GateFailed, Recipe
from trtfarm.precision.step import PrecisionResult, precision_key, prepare_precision
from trtfarm.publishing.registry import local_copy
from trtfarm.store import Store, is_uri
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.model import Accuracy, ModelSource, PrecisionStep
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun


def step_of(result: PrecisionResult, model: ModelSource, recipe: Recipe, key: str,
            sha256: str | None = None) -> PrecisionStep:
    """The record of a step's ``result`` for ``model``: its converted ONNX's store key and sha256, and the gate's.

    ``sha256``: the converted model's, as the store records it (else the local file is hashed).
    """
    converted = result.path != model.path
    prefix = layout.converted_prefix(model.name, model.onnx_digest, key)
    gate = "passed" if result.report.passed else "not_run" if result.report.passed is None else "failed"
    accuracy = Accuracy.model_validate({
        **result.report.to_json(), "nodes": result.nodes.to_json() if result.nodes else None,
        "normalised": result.notes, "unchecked_versions": result.unchecked_versions}) if recipe.mode != "fp32" else None
    return PrecisionStep(recipe=recipe, converted_digest=result.digest,
                         converted_key=layout.converted_model_key(prefix) if converted else None,
                         converted_sha256=(sha256 or sha256_file(result.path)) if converted else None,
                         pinned_fp32_nodes=result.pinned, accuracy=accuracy, gate=gate,
                         gate_detail=result.summary())


def run_precision(store: Store, job: PrecisionJob) -> PrecisionRun:
    """Run (or reuse, when another run recorded it first) the step; a refusing gate is a failed run, its words kept.

    Other refusals of the input (``ConversionError``, a bad data file) propagate, as the step's own errors.
    """
    model, calibration, heldout = _here(job)
    work = work_dir("converted", model.name, model.onnx_digest[:12], job.recipe.mode)  # the user's own, checked
    try:
        result = prepare_precision(store, model.name, model.path, model.onnx_digest, job.recipe, work,
                                   calibration=calibration, heldout=heldout, key=job.key, max_memory=job.max_memory,
                                   unchecked_modelopt=job.unchecked_modelopt)
    except GateFailed as failed:
        return PrecisionRun(job_id=job.job_id, model=model.name, failed=str(failed))
    step = step_of(result, model, job.recipe, job.key)
    return PrecisionRun(job_id=job.job_id, model=model.name, step=step,
                        build_path=result.path if step.converted_key else None)


def _here(job: PrecisionJob) -> tuple[ModelSource, Path | None, Path | None]:
    """The job's model and data files on this machine: planning's own, else at the same places in a fetched copy."""
    planned = job.model
    if planned.path.is_file() or not is_uri(job.export.uri):
        return planned, job.calibration, job.heldout
    path = local_copy(job.export)

    def moved(p: Path | None) -> Path | None:
        try:
            return path.parent / p.relative_to(planned.path.parent) if p else None
        except ValueError:  # outside the export's folder: as given
            return p

    return planned.model_copy(update={"path": path}), moved(job.calibration), moved(job.heldout)


def with_precision(store: Store, model: ModelSource, recipe: Recipe, calibration: Path | None,
                   heldout: Path | None) -> ModelSource:
    """``model`` with its precision step run here (``GateFailed`` when the gate refuses): for tools and tests."""
    if recipe.mode == "fp32" and not recipe.auto_pin:  # used as exported: nothing to convert or gate
        step = PrecisionStep.as_exported(recipe, model.onnx_digest)
        return model.model_copy(update={"build_path": None, "precision": step, "heldout": heldout})
    key = precision_key(recipe, model.onnx_digest, calibration, heldout)
    job = PrecisionJob(model=model, export=ExportRef(str(model.path), model.name), recipe=recipe, key=key,
                       calibration=calibration, heldout=heldout)
    run = run_precision(store, job)
    if run.failed:
        raise GateFailed(run.failed)
    return model.model_copy(update={"build_path": run.build_path, "precision": run.step, "heldout": heldout})
