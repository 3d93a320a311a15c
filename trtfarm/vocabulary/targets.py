"""Each target of a run: its build digest and plan key, and why this machine cannot build it, as it was told.

Nothing here builds. ``plan_targets`` is pure given its inputs, so the flows and ``trtfarm targets`` share it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from trtfarm import layout
from trtfarm.identity import build_digest
from trtfarm.profiles.profile import Profile, profiles_json
from trtfarm.vocabulary.fleet import ResolvedTarget
from trtfarm.vocabulary.model import ModelSource
from trtfarm.vocabulary.pointer import SeenPointer
from trtfarm.vocabulary.promotion import Promotion


class ServeGap(NamedTuple):
    """Why this machine cannot build a target, and apart from it what would change that (``""``: nothing said)."""

    why: str
    fix: str = ""

    @property
    def reason(self) -> str:
        """The one line a person reads: ``why; fix``."""
        return f"{self.why}; {self.fix}" if self.fix else self.why


@dataclass(frozen=True)
class TargetWork:
    """One target of a run: its build digest, where its plan goes, and whether this machine can build it.

    Work for a run, not a TensorRT plan: the plan is what its build writes under ``prefix``.
    """

    target: ResolvedTarget
    build_digest: str
    prefix: str
    skip_reason: str | None  # why this machine cannot build it (``ServeGap.reason``); None: it can
    release_key: str  # the release pointer this target's plans move (the candidate channel's, with promotion)
    pointer: SeenPointer | None = None  # the release pointer as planning read it (None: not read, or damaged)
    manifest_absent: bool = False  # planning found no manifest of this build: the publish need not look again
    promotion: Promotion | None = None  # farm.yaml's promotion: releases go to the candidate channel
    skip_fix: str = ""  # with a skip_reason: what would let this machine build it (``ServeGap.fix``)

    @property
    def manifest_key(self) -> str:
        """Where this build's manifest lives."""
        return layout.manifest_key(self.prefix)


def plan_targets(model: ModelSource, converted_digest: str, targets: Sequence[ResolvedTarget],
                 profiles: Sequence[Profile],
                 gap_of: Callable[[ResolvedTarget], ServeGap | None] | None) -> list[TargetWork]:
    """Compute every target's build digest and plan key (keyed on its compatibility class).

    ``gap_of`` says why this machine cannot build a target (local mode: those targets are skipped;
    ``project/buildable.py``'s ``buildable_here``); None in farm mode, where each target goes to its pool's workers
    and they check themselves.
    """
    plans = []
    for t in targets:
        digest = build_digest(converted_onnx_digest=converted_digest, profiles=profiles_json(profiles),
                              settings=t.settings.model_dump(mode="json"), flavour=t.toolchain.flavour.value,
                              toolchain_version=t.toolchain.version, compat_class=t.compat_class)
        prefix = layout.plan_prefix(model.name, model.onnx_digest, t.gpu_key, t.toolchain_label, digest)
        gap = gap_of(t) if gap_of else None
        plans.append(TargetWork(t, digest, prefix, gap.reason if gap else None,
                                layout.channel_key(model.name, t.gpu_key, t.toolchain_label,
                                                   "candidate" if model.promotion else "stable"),
                                promotion=model.promotion, skip_fix=gap.fix if gap else ""))
    return plans


def group_by_build(plans: Sequence[TargetWork]) -> list[list[TargetWork]]:
    """Targets that share a build digest (one compatibility class) are built once: group them, order kept.

    This holds in farm mode too: a class that spans several GPU models' pools is built on one of them.
    """
    groups: dict[str, list[TargetWork]] = {}
    for p in plans:
        groups.setdefault(p.build_digest, []).append(p)
    return list(groups.values())
