"""One output's figures against FP32, as the gate computes them and a precision step records them.

Plain data with no numpy or onnx, so the vocabulary's record of a precision step (``vocabulary.model.Accuracy``)
holds these very objects without importing the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class OutputFigures:
    """How one output of the converted model compares with FP32.

    ``cosine_mean``/``cosine_min`` are over every sample row; ``cosine_signal_*`` over the ``signal_rows`` rows
    whose reference carries signal (None when none does). ``max_error`` is ``max_abs`` over ``scale``.
    ``sample_spread`` is the widest range one value of the FP32 output takes across the samples (None: one sample);
    ``same_for_every_sample`` says it is within the mode's resolution at ``scale``: the output does not respond to
    these inputs, so the comparison says nothing of the conversion there.

    ``kind`` says how the output is judged (probability, classes, embedding, values); ``quantile_error`` is the
    ``error_quantile`` of |error| over ``scale``; ``flips`` the share of values whose decision changes at each
    threshold (probability maps); ``decided_by`` names the figures that decide the output's verdict.
    """

    output: str
    cosine_mean: float
    cosine_min: float
    max_abs: float
    max_rel: float
    extra: dict = field(default_factory=dict)
    scale: float | None = None
    scale_from: str = ""
    max_error: float | None = None
    signal_rows: int | None = None
    rows: int | None = None
    cosine_signal_mean: float | None = None
    cosine_signal_min: float | None = None
    uninformative: str = ""
    sample_spread: float | None = None
    same_for_every_sample: bool = False
    kind: str = ""
    quantile_error: float | None = None
    error_quantile: float | None = None
    flips: dict[str, float] = field(default_factory=dict)
    decided_by: list[str] = field(default_factory=list)

    GATE_FIGURES: ClassVar[tuple[str, ...]] = (
        "kind", "cosine_mean", "cosine_min", "max_abs", "max_rel", "max_error", "quantile_error", "error_quantile",
        "flips", "scale", "scale_from", "signal_rows", "cosine_signal_mean", "cosine_signal_min", "decided_by")

    def gate_figures(self) -> dict:
        """The figures the manifest's ``onnx`` check shows for this output (those known), and its extras."""
        return {k: v for k in self.GATE_FIGURES if (v := getattr(self, k)) is not None and v != "" and v != {}
                and v != []} | self.extra
