"""Each target of a run: its build digest and plan key, and whether this machine can build it.

Nothing here builds. ``plan_targets`` is pure given its inputs, so the flows and ``trtfarm targets`` share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from trtfarm import layout
from trtfarm.identity import build_digest
from trtfarm.machine.capabilities import Capabilities
from trtfarm.machine.flavour import INSTALL_HINT
from trtfarm.machine.header import version_matches
from trtfarm.profiles.profile import Profile, profiles_json
from trtfarm.vocabulary.fleet import Flavour, ResolvedTarget
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


def serve_check(target: ResolvedTarget, caps: Capabilities) -> str | None:
    """None when this machine can build ``target``; else the reason it cannot (``serve_gap``'s, as one line)."""
    gap = serve_gap(target, caps)
    return gap.reason if gap else None


def serve_gap(target: ResolvedTarget, caps: Capabilities) -> ServeGap | None:
    """None when this machine can build ``target``; else why not and, as its own field, what would fix it."""
    flavour, want = target.toolchain.flavour.value, target.toolchain.version
    have = caps.versions.get(flavour)
    if have is None:
        return ServeGap(f"`{flavour}` {want} is not installed here", INSTALL_HINT[flavour].replace('VERSION', want))
    if not version_matches(have, want):
        return ServeGap(f"installed {flavour} is {have}, the target needs {want}")
    if target.toolchain.flavour is Flavour.tensorrt_rtx:
        return None  # ahead-of-time build: no GPU needed
    from trtfarm.machine.match import best_fit
    from trtfarm.vocabulary.device_spec import spec_of_target

    spec = spec_of_target(target)
    found = best_fit(spec, caps.gpus)
    if not found.ok:
        why = f" ({found.reason})" if caps.gpus.gpus else ""
        return ServeGap(f"needs a {spec.describe()} GPU to build on", f"this machine has {caps.gpus.describe()}{why}")
    return None


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
                 profiles: Sequence[Profile], caps: Capabilities | None) -> list[TargetWork]:
    """Compute every target's build digest and plan key (keyed on its compatibility class).

    ``caps`` is this machine's (local mode: targets it cannot serve are skipped); None in farm mode, where each target
    goes to its pool's workers and they check themselves.
    """
    plans = []
    for t in targets:
        digest = build_digest(converted_onnx_digest=converted_digest, profiles=profiles_json(profiles),
                              settings=t.settings.model_dump(mode="json"), flavour=t.toolchain.flavour.value,
                              toolchain_version=t.toolchain.version, compat_class=t.compat_class)
        prefix = layout.plan_prefix(model.name, model.onnx_digest, t.gpu_key, t.toolchain_label, digest)
        gap = serve_gap(t, caps) if caps else None
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
