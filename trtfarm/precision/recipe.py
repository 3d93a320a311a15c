"""Precision recipes: how an FP32 export becomes the ONNX the (strongly typed) builder sees."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from trtfarm.errors import UserInputError

Mode = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
Task = Literal["embedding", "classifier", "generic"]


Kind = Literal["probability", "classes", "embedding", "values"]


class Thresholds(BaseModel):
    """What the accuracy gate accepts, per output.

    In farm.yaml any subset may be given: the fields left out keep the mode's defaults. ``outputs`` sets them for
    one output (by name); the fields it leaves out keep the recipe's.
    """

    model_config = ConfigDict(extra="forbid")
    cosine_mean: float = Field(0.9999, ge=0, le=1, description="mean cosine over the samples whose output has signal")
    cosine_min: float = Field(0.999, ge=0, le=1, description="lowest cosine over the samples whose output has signal")
    max_error: float = Field(0.01, ge=0, description="|error| as a share of the output's scale (its range), at the "
                                                     "error_quantile of the output's values")
    error_quantile: float = Field(0.99, ge=0.5, le=1, description="the quantile of |error| judged against "
                                                                  "max_error (Polygraphy's default; 1: the largest "
                                                                  "single error)")
    flip_share: float = Field(0.001, ge=0, le=1, description="probability maps: the share of values whose decision "
                                                             "(above or below a threshold of decision_at) may change")
    decision_at: list[float] = Field(default_factory=list, description="probability maps: the thresholds the "
                                                                       "model's users decide at (default 0.5, and "
                                                                       "the graph's own comparisons)")
    recall_at_k: float = Field(0.9, ge=0, le=1, description="embedding models: recall@k of FP32's neighbours")
    top1_agreement: float = Field(0.99, ge=0, le=1, description="classifiers and class maps: same arg-max as FP32")
    k: int = Field(10, ge=1)
    kind: Kind | None = Field(None, description="how the output is judged (default: from the graph and the task)")
    outputs: dict[str, Thresholds] = Field(default_factory=dict, description="output name -> its own thresholds")

    def for_output(self, name: str) -> Thresholds:
        """The thresholds in force for output ``name``: these, with the fields ``outputs[name]`` sets replaced."""
        own = self.outputs.get(name)
        if own is None:
            return self
        return self.model_copy(update={**own.model_dump(exclude_unset=True), "outputs": {}})


DEFAULT_THRESHOLDS = {
    "fp16": Thresholds(cosine_mean=0.9999, cosine_min=0.999, max_error=0.01, flip_share=0.001),
    "bf16": Thresholds(cosine_mean=0.999, cosine_min=0.99, max_error=0.05, flip_share=0.005),
    "int8": Thresholds(cosine_mean=0.995, cosine_min=0.98, recall_at_k=0.8, max_error=0.1, flip_share=0.01),
    "fp8": Thresholds(cosine_mean=0.99, cosine_min=0.95, recall_at_k=0.8, max_error=0.2, flip_share=0.02),
    "fp32": Thresholds(cosine_mean=1.0, cosine_min=1.0, max_error=0.0, flip_share=0.0),
}


class Recipe(BaseModel):
    """A precision recipe; ``"fp16"`` alone is shorthand for ``{mode: fp16}``."""

    model_config = ConfigDict(extra="forbid")
    mode: Mode = "fp32"
    keep_fp32: list[str] = Field(default_factory=list, description="node-name regexes kept in FP32")
    keep_fp32_ops: list[str] = Field(default_factory=list, description="op types kept in FP32")
    data_max: float = Field(512, gt=0, description="AutoCast: keep nodes whose outputs exceed this in FP32 "
                                                   "(inf: convert every node, the naive conversion)")
    init_max: float = Field(65504, gt=0, description="AutoCast: keep initializers beyond this in FP32")
    auto_pin: bool = Field(False, description="search the smallest FP32 node set that passes the gate")
    task: Task = "generic"
    output_ranges: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="output name -> [low, high]: the scale the gate measures errors against "
                                          "(default: implied by a Sigmoid/Softmax/Tanh output, else FP32's range)")
    thresholds: Thresholds | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        return {"mode": value} if isinstance(value, str) else value

    @field_validator("keep_fp32")
    @classmethod
    def _regexes_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"keep_fp32 {pattern!r} is not a valid regular expression ({err}); escape "
                                 "literal brackets and dots, e.g. 'fc\\[0\\]' or '^head\\.'") from None
        return value

    @field_serializer("thresholds")
    def _only_set_thresholds(self, value: Thresholds | None) -> dict | None:
        """Dump only the thresholds the recipe sets, so a dumped recipe keeps the mode's defaults for the rest."""
        return value.model_dump(exclude_unset=True) if value is not None else None

    @model_validator(mode="after")
    def _ranges_are_ranges(self) -> Recipe:
        bad = {k: list(v) for k, v in self.output_ranges.items() if not v[0] < v[1]}
        if bad:
            raise ValueError(f"output_ranges {bad}: write [low, high] with low < high, e.g. {{prob: [0, 1]}}")
        return self

    @property
    def gate_thresholds(self) -> Thresholds:
        """The thresholds in force: the mode's defaults, with the fields the recipe sets replaced."""
        default = DEFAULT_THRESHOLDS[self.mode]
        if self.thresholds is None:
            return default
        return default.model_copy(update=self.thresholds.model_dump(exclude_unset=True) | {
            "outputs": self.thresholds.outputs})


def clip(text: str, limit: int = 300) -> str:
    """``text`` whole when it fits ``limit`` characters, else cut at the last word boundary before it, with "…".

    For a library's reason quoted inside a refusal: a cut never leaves half a word (or half an option) behind.
    """
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    cut = cut[:space] if space > limit // 2 else cut  # one very long word (a path): cut inside it, marked
    return cut.rstrip(" ,;:.-") + "…"


class GateFailed(UserInputError):
    """The converted model is not accurate enough; every build of this recipe stops."""


class GateError(GateFailed):
    """The gate could not compare the models (onnxruntime could not load or run one): no build of this recipe."""
