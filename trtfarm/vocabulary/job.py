"""One build job: everything a builder needs for one compatibility-class build, decided by the planner."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from trtfarm.profiles.profile import Profile
from trtfarm.vocabulary.manifest import Manifest
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.target_outcome import TargetOutcome
from trtfarm.vocabulary.targets import TargetWork

ProfileText = dict[str, str]  # {"input_ids": "1x16:16x128:32x512", ...}


class BuildJob(BaseModel):
    """One compatibility-class build: everything a builder needs, decided by the parent.

    ``model.path`` is where the parent read the model; a farm child fetches ``model_uri`` instead and checks the
    bytes against ``model.onnx_digest``. The converted ONNX (if any) comes from the store key in ``model.precision``.
    What planning read of the store travels with it (each plan's release pointer and ETag, whether its manifest was
    absent, a refit's parent manifest), so the build does not read it again.
    """

    model_config = ConfigDict(frozen=True)
    model: ModelSource
    model_uri: str  # the export folder URI (farm) or the local ONNX path (local mode)
    profiles: list[ProfileText]
    plans: list[TargetWork]  # every target this build serves; they share one build digest
    build_digest: str
    refit_of: str | None = None  # refit this released manifest (store key) instead of building; one target
    parent: Manifest | None = None  # the manifest at ``refit_of``, as planning read it
    full_build_reason: str = ""  # why a refit run builds this target in full
    fallback: bool = False  # the full build that replaces a refit the workers could not do
    release_key: str | None = None  # the run's key id (what signs its releases); the provenance states it

    @property
    def lead(self) -> TargetWork:
        """The target whose settings build the plan (the others share its bytes)."""
        return self.plans[0]

    @property
    def targets(self) -> list[str]:
        """The target ids this job publishes."""
        return [p.target.id for p in self.plans]

    @property
    def pools(self) -> list[str]:
        """The work pools whose workers can run this job (their GPUs share the compatibility class), in order."""
        return list(dict.fromkeys(p.target.gpu.pool for p in self.plans))

    @property
    def job_id(self) -> str:
        """Unique within a model's run: the build digest, and whether it is a refit or a refit's fallback."""
        return self.build_digest[:16] + ("-refit" if self.refit_of else "-fallback" if self.fallback else "")

    def profile_models(self) -> list[Profile]:
        """The optimization profiles as models."""
        return [Profile.model_validate(p) for p in self.profiles]


class JobResult(BaseModel):
    """What a job did: one outcome per target it serves, or why a refit could not run on this worker."""

    job_id: str
    model: str  # the model name: target ids repeat across models
    outcomes: list[TargetOutcome] = []
    refit_unavailable: str | None = None  # the runtime's reason; the parent builds the target in full instead

    @property
    def failed(self) -> list[TargetOutcome]:
        """The outcomes that failed."""
        return [o for o in self.outcomes if o.status == "failed"]
