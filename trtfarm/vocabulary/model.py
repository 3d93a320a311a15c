"""The model a run builds: its bytes' content addresses and the precision step that ran before any build.

Values only: checking and digesting a file is ``trtfarm.modelfile``; planning decides the precision step
(``planning.precision``) and a ``PrecisionJob`` runs it (``building.precision_runner``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from trtfarm.precision.output_record import OutputFigures
from trtfarm.precision.recipe import Recipe
from trtfarm.vocabulary.promotion import Promotion


class Accuracy(BaseModel):
    """The precision gate's record: its verdict and figures per output, each node's precision, what was normalised.

    The fields of the gate's report (``precision.gate.GateReport``), ``nodes`` (``precision.nodes``) and
    ``normalised`` (what was made right before the converters saw the model).
    """

    model_config = ConfigDict(frozen=True, extra="allow")
    mode: str = ""
    passed: bool | None = None
    thresholds: dict = {}
    figures: list[OutputFigures] = []
    failures: list[str] = []
    diverging_nodes: list[dict] = []
    note: str = ""
    warnings: list[str] = []
    nodes: dict | None = None
    normalised: list[str] = []
    # the libraries the step ran at other versions than its workarounds were compared with (--unchecked-modelopt)
    unchecked_versions: dict[str, str] = {}


class PrecisionStep(BaseModel):
    """What the precision step decided: the recipe, the converted ONNX (digest, store key) and the gate's verdict."""

    model_config = ConfigDict(frozen=True)
    recipe: Recipe = Recipe()
    converted_digest: str
    converted_key: str | None = None  # store key of the converted ONNX (None: fp32, the export is built as is)
    converted_sha256: str | None = None
    pinned_fp32_nodes: list[str] = []
    accuracy: Accuracy | None = None
    gate: Literal["passed", "failed", "not_run"] = "passed"
    gate_detail: str = ""

    @classmethod
    def as_exported(cls, recipe: Recipe, onnx_digest: str) -> PrecisionStep:
        """The step of an fp32 recipe: the export is built as it is, nothing converted or gated."""
        return cls(recipe=recipe, converted_digest=onnx_digest,
                   gate_detail="fp32 gate passed (fp32 recipe: the model is used as exported)")

    @property
    def mode(self) -> str:
        """The recipe's mode: fp32, fp16, bf16, int8 or fp8."""
        return self.recipe.mode


class ModelSource(BaseModel):
    """An ONNX export and its content addresses (``onnx_digest`` is what a child checks the bytes against)."""

    model_config = ConfigDict(frozen=True)
    name: str
    path: Path
    source_uri: str
    onnx_digest: str
    graph_digest: str | None  # None until ``verified``: nothing is built from a model before that
    exported_at: str
    files: tuple[tuple[str, str], ...] = ()  # (name, sha256) of the ONNX file and each external data file
    build_path: Path | None = None  # the precision-converted ONNX the builder parses (None: as exported)
    precision: PrecisionStep | None = None
    # the held-out .npz the accuracy gate and the engine check on the GPU feed (``--heldout``, farm.yaml's, else
    # heldout.npz beside the model); None: generated inputs
    heldout: Path | None = None
    # why this run's plans move no release pointer (a trial of a recipe other than the model's declared one)
    trial: str | None = None
    # ``--release``: a plan whose precision gate is not passed is released anyway, recorded as an override
    release_override: bool = False
    # farm.yaml's promotion: block: releases land in the candidate channel (None: in stable, as before)
    promotion: Promotion | None = None

    @property
    def plan_input(self) -> Path:
        """The ONNX the builder parses."""
        return self.build_path or self.path

    @property
    def plan_digest(self) -> str:
        """The digest that feeds build digests: of the converted ONNX."""
        return self.precision.converted_digest if self.precision else self.onnx_digest

    @property
    def recipe_mode(self) -> str:
        """The precision mode the plan is built in."""
        return self.precision.mode if self.precision else "fp32"
