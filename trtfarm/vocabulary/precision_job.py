"""The precision step as a job planning decides and the executor runs before the builds that wait for it.

Plain values: ``PrecisionJob`` names the step by its inputs (``key``: ``precision.step.precision_key``) and
``PrecisionRun`` says what running it gave. Planning never runs the step; it reuses a recorded one or emits a job.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from trtfarm.precision.recipe import Recipe
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import ResolvedTarget
from trtfarm.vocabulary.model import ModelSource, PrecisionStep


class PrecisionJob(BaseModel):
    """One precision step to run: convert ``model`` by ``recipe``, gate it, record it under ``key`` in the store.

    ``model.path``, ``calibration`` and ``heldout`` are where planning found the files; a farm worker fetches
    ``export`` and finds them at the same places in its copy. ``lead``: the model's first target; the farm runs the
    job on its pool, toolchain queue and image (a worker that builds for the model anyway).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)  # (built where first used: an fp32 build has none)
    model: ModelSource
    export: ExportRef
    recipe: Recipe
    key: str
    calibration: Path | None = None
    heldout: Path | None = None
    lead: ResolvedTarget | None = None
    max_memory: int | None = None  # the bytes the step may hold (``--max-memory``); None: its default budget
    unchecked_modelopt: bool = False  # ``--unchecked-modelopt``: other library versions than the workarounds' run

    @property
    def job_id(self) -> str:
        """Unique within a run: the step's key."""
        return f"precision-{self.key[:16]}"


class PrecisionRun(BaseModel):
    """What a precision job gave: the step's record, or why it failed (``failed``: the gate's words, as today's).

    ``build_path``: where the converted ONNX lies on the machine that ran the job (a build there reuses it when its
    sha256 matches; elsewhere it is downloaded from the store).
    """

    model_config = ConfigDict(defer_build=True)  # (built where first used: an fp32 build has no precision step)
    job_id: str
    model: str
    step: PrecisionStep | None = None
    failed: str = ""
    build_path: Path | None = None
