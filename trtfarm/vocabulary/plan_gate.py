"""A published plan's precision gate as its manifest records it: one reading for the release rules and the views.

``releases/rules.py`` decides on the verdict (``RELEASABLE``); ``state/summaries.py`` keeps it in each
manifest's summary, so ``status`` says why a plan is held without reading the manifest again.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtfarm.layout import short_ref
from trtfarm.vocabulary.manifest import Manifest

__all__ = ["VERDICTS", "PlanGate", "held_fix", "plan_gate"]


@dataclass(frozen=True)
class PlanGate:
    """A published plan's precision gate as its manifest records it: the verdict, and what it rests on."""

    recipe: str
    verdict: str  # passed, failed, not judged, not verified
    why: str = ""  # a few words: the output the verdict rests on

    def text(self) -> str:
        """``fp16 gate not judged (output 'y' is the same for every input)``."""
        return f"{self.recipe} gate {self.verdict}" + (f" ({self.why})" if self.why else "")


VERDICTS = ("passed", "failed", "not judged", "not verified")


def plan_gate(m: Manifest) -> PlanGate:
    """The precision gate's verdict of ``m``'s plan (an FP32 plan without one: passed, there was nothing to convert).

    A converted plan whose manifest records no verdict is ``not judged``; one recorded before the verdict had a
    name is read from ``passed`` (None: BF16's ``not verified``, any other recipe's ``not judged``).
    """
    acc, recipe = m.precision.accuracy or {}, m.precision.recipe
    if not acc:
        return PlanGate(recipe, "passed" if recipe == "fp32" else "not judged",
                        "" if recipe == "fp32" else "the manifest records no accuracy verdict")
    verdict = acc.get("verdict") if acc.get("verdict") in VERDICTS else \
        {True: "passed", False: "failed"}.get(acc.get("passed"), "not verified" if recipe == "bf16" else "not judged")
    return PlanGate(recipe, verdict, _why(verdict, acc))


def _why(verdict: str, acc: dict) -> str:
    figures = [f for f in acc.get("figures") or [] if isinstance(f, dict)]
    same = [repr(f.get("output")) for f in figures if f.get("same_for_every_sample")]
    blind = [repr(f.get("output")) for f in figures if f.get("signal_rows") == 0]
    if verdict == "not judged" and same:
        return f"output {', '.join(same)} {'is' if len(same) == 1 else 'are'} the same for every input"
    if verdict == "not judged" and blind:
        return f"no input carries signal on output {', '.join(blind)}"
    failures = acc.get("failures") or []
    return str(failures[0]).split(";")[0][:120] if verdict == "failed" and failures else ""


def held_fix(manifest_key: str) -> str:
    """What releases a plan its gate holds: held-out data, or an override the history records (a run's or by hand)."""
    return ("held-out data (--heldout heldout.npz, or heldout.npz beside the export), or release it anyway, recorded "
            f"in the history: build again with --release, or `trtfarm release {short_ref(manifest_key)} --force "
            "--reason ...`")
