"""Run one ``BuildJob``: check the model bytes, build (or refit), publish, and return a typed result.

The same call runs a job in ``trtfarm build``'s process and on a farm worker. It never plans: the job says what to
build. The model is read from the job's URI and checked against the sha256 the parent computed; the precision-
converted ONNX comes from the store (checked against its sha256), never converted again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trtfarm.building.build import build_group
from trtfarm.errors import InvalidModel, UserInputError
from trtfarm.identity import files_digest, onnx_digest, sha256_file, sha256_unchanged
from trtfarm.publishing.registry import local_copy
from trtfarm.signing.keys import key_hint
from trtfarm.store import Store, is_uri
from trtfarm.store.base import Progress
from trtfarm.toolchain import BuildProgress
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.target_outcome import TargetOutcome

if TYPE_CHECKING:
    from trtfarm.signing.keys import Signer


def job_model(store: Store, job: BuildJob, work: Path) -> ModelSource:
    """The job's model on this machine: the exact bytes the parent planned, and the converted ONNX beside them."""
    path = local_copy(ExportRef(job.model_uri, job.model.name)) if is_uri(job.model_uri) else Path(job.model_uri)
    if not path.is_file():
        raise UserInputError(f"{path}: the model this build was planned for is gone; rerun the build")
    digest = _digest(path, job.model)
    if digest != job.model.onnx_digest:
        raise UserInputError(f"{job.model_uri}: the model bytes changed since the run was planned (sha256 "
                             f"{job.model.onnx_digest[:12]} planned, {digest[:12]} found); rerun the build")
    model = job.model.model_copy(update={"path": path, "heldout": _heldout_here(job.model, path)})
    step = job.model.precision
    if step is None or step.converted_key is None:
        return model.model_copy(update={"build_path": None})
    local = job.model.build_path
    if local is None or not local.is_file() or sha256_file(local) != step.converted_sha256:
        local = work / "converted.onnx"
        store.download_file(step.converted_key, local, sha256=step.converted_sha256)
    return model.model_copy(update={"build_path": local})


def _heldout_here(planned: ModelSource, path: Path) -> Path | None:
    """The held-out file on this machine: in the fetched export where it was in the planned one, else as given."""
    if planned.heldout is None:
        return None
    try:
        return path.parent / planned.heldout.relative_to(planned.path.parent)
    except ValueError:  # outside the export's folder: a local build's --heldout, on this same machine
        return planned.heldout


def _digest(path: Path, planned: ModelSource) -> str:
    """The model's ``onnx_digest`` now, over the files planning found, without parsing the ONNX again.

    A changed ONNX file changes its own sha256, so a new set of external files cannot pass unnoticed. Where planning
    named no files, or one is gone, the file is parsed (and a missing one refused with the fix).
    """
    files = [(n, path.parent / n) for n, _ in planned.files]
    if not files or files[0][0] != path.name or not all(f.is_file() for _, f in files):
        return onnx_digest(path)
    return files_digest([(n, sha256_unchanged(f)) for n, f in files])  # planned in this process: not read again


def _failed(job: BuildJob, why: str) -> JobResult:
    return JobResult(job_id=job.job_id, model=job.model.name,
                     outcomes=[TargetOutcome(t, "failed", why, build_digest=job.build_digest) for t in job.targets])


def run_job(store: Store, job: BuildJob, work: Path, *, run_id: str | None = None,
            progress: BuildProgress | None = None,
            upload_progress: Callable[[str], Progress] | None = None, signer: Signer | None = None) -> JobResult:
    """Build (or refit) ``job`` and publish a manifest, its provenance and (with ``signer``) a signature per target.

    The user's errors (a model the parser rejects, a bad profile) become failed outcomes; infrastructure errors
    propagate, so the caller's retry policy sees them; anything else is a bug and propagates too. A model that
    onnx.checker refuses (checked beside a local build: ``InvalidModel``) is no one target's failure: it propagates.
    """
    try:
        model = job_model(store, job, work)
        if job.refit_of:
            return _refit(store, job, model, run_id, signer)
        outcomes = build_group(store, model, job.plans, job.profile_models(), progress=progress,
                               upload_progress=upload_progress, run_id=run_id, signer=signer,
                               release_key=job.release_key)
    except InvalidModel:  # checked beside a local build: the model itself is refused, as planning refuses it
        raise
    except UserInputError as err:
        return _failed(job, str(err))
    if job.full_build_reason:
        for o in outcomes:
            o.note("full-build", f"full build: {job.full_build_reason}")
    return _keys_noted(job, signer, JobResult(job_id=job.job_id, model=job.model.name, outcomes=outcomes))


def _keys_noted(job: BuildJob, signer: Signer | None, result: JobResult) -> JobResult:
    """Say on each built target which key signed it where that is not the run's key (``job.release_key``).

    A farm worker signs its builds and their releases with its own key; the provenance states both ids, and the
    outcome says so when they differ, so a run never signs with two keys unnoticed.
    """
    worker = key_hint(signer.public_key_pem) if signer is not None else None
    if job.release_key is None or worker == job.release_key:  # one key (or none) signs the whole run
        return result
    said = (f"signed by this worker's key {worker[:12]}" if worker else "unsigned: this worker has no signing key") \
        + f", not the run's key {job.release_key[:12]} (the provenance states both)"
    for o in result.outcomes:
        if o.status == "built":
            o.note("signed-by", said)
    return result


def _refit(store: Store, job: BuildJob, model: ModelSource, run_id: str | None, signer: Signer | None) -> JobResult:
    from trtfarm.building.refit import refit_and_publish
    from trtfarm.toolchain.refitter import RefitUnavailable

    try:
        outcome = refit_and_publish(store, model, job.lead, job.refit_of, job.profile_models(), run_id=run_id,
                                    signer=signer, parent=job.parent, release_key=job.release_key)
    except RefitUnavailable as err:
        return JobResult(job_id=job.job_id, model=job.model.name, refit_unavailable=str(err))
    return _keys_noted(job, signer, JobResult(job_id=job.job_id, model=job.model.name, outcomes=[outcome]))
