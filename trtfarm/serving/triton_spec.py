"""What a model's ``config.pbtxt`` says, decided from the request and the newest version's manifests.

The backend follows the plans' toolchain (``triton_config.SERVED_BY``). The instance groups: one per optimization
profile (``per-profile``, the ``tensorrt_plan`` platform's default: each instance one execution context, counted from
the engine check's contexts that fit), or one group whose instances serve every profile (``shared``, the Python
backend's only layout: Triton names profiles in instance groups on its TensorRT backend only). Warm-ups: a profile's
opt shapes, where every group takes them (``ConfigSpec.warmups``); a profile left without one is named in the notes.
Batching: explicit batch dims, or Triton's batch dim with preferred sizes from the traffic's buckets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from trtfarm.errors import UserInputError
from trtfarm.profiles.profile import ProfilesFile, profiles_json
from trtfarm.serving.python_model import REQUIREMENTS
from trtfarm.serving.triton_config import ConfigSpec, InstanceGroup, served_by
from trtfarm.signing.accepted import AcceptedReleases
from trtfarm.signing.keys import TrustedKeys
from trtfarm.vocabulary.manifest import Manifest

AUTO_INSTANCES_CAP = 4  # instances per profile taken from the engine check's contexts_that_fit, at most
Layout = Literal["per-profile", "shared"]  # one instance group per profile, or one whose instances serve them all


@dataclass(frozen=True)
class TritonRequest:
    """What ``trtfarm triton`` was asked for."""

    model: str
    repo: Path
    gpus: tuple[str, ...] = ()
    toolchain: str | None = None
    keep: int = 2
    instances: int | None = None
    batching: Literal["explicit", "dynamic"] = "explicit"
    traffic: ProfilesFile | None = None  # the profiles file derived from traffic (its buckets: preferred sizes)
    trust: TrustedKeys | None = None  # the fleet's trusted keys (None: unsigned-checked)
    accepted: AcceptedReleases | None = None  # this host's memory of accepted releases (rollback)
    max_age: timedelta | None = None  # this host's freeze limit on release claims
    channel: Literal["stable", "candidate"] = "stable"  # the channel whose pointers are served
    groups: Layout | None = None  # None: per-profile on the tensorrt_plan platform, shared on the Python backend


def plan_file(gpu: str) -> str:
    """The plan's name in a version folder."""
    return f"model.{gpu}.plan"


def _instances(ms: Sequence[Manifest], req: TritonRequest, notes: list[str], shared: bool) -> list[int]:
    """Instances per profile: ``--instances``, else the contexts that fit (one group for all: the least of them)."""
    profiles = len(ms[0].build.profiles) or 1
    each = "instances" if shared else "instances per profile"
    if req.instances:
        notes.append(f"{each}: {req.instances} (--instances)")
        return [req.instances] * profiles
    fits = [m.verification.engine.figures.get("contexts_that_fit") for m in ms]
    if all(isinstance(f, list) and len(f) == profiles for f in fits):
        counts = [min(AUTO_INSTANCES_CAP, *(f[i] for f in fits)) for i in range(profiles)]
        counts = [min(counts)] * profiles if shared else counts
        notes.append(f"{each}: {counts[0] if shared else counts}, the contexts that fit on the GPU (at most "
                     f"{AUTO_INSTANCES_CAP})")
        return counts
    notes.append(f"{each}: 1 (engine check pending on the GPU; --instances N)")
    return [1] * profiles


def _groups(ms: Sequence[Manifest], req: TritonRequest, notes: list[str]) -> list[InstanceGroup]:
    """The instance groups: one per profile, or one whose instances serve every profile (the Python backend's)."""
    served = served_by(ms[0].target.flavour)
    layout = req.groups or ("per-profile" if served == "tensorrt_plan" else "shared")
    if layout == "per-profile" and served != "tensorrt_plan":
        raise UserInputError("--instance-groups per-profile: TensorRT-RTX plans run on the Python backend, and "
                             "Triton names profiles in instance groups on its TensorRT backend only; leave it out")
    profiles = tuple(range(len(ms[0].build.profiles)))
    counts = _instances(ms, req, notes, shared=layout == "shared")
    if layout == "shared":
        return [InstanceGroup("all-profiles", counts[0], profiles)]
    return [InstanceGroup(f"profile-{i}", n, (i,) if profiles else ()) for i, n in enumerate(counts)]


def _preferred(ms: Sequence[Manifest], req: TritonRequest, notes: list[str]) -> list[int]:
    if req.batching == "explicit":
        notes.append("max_batch_size 0: batch dims as built, no batching (--dynamic-batching)")
        return []
    if req.traffic is None or not req.traffic.buckets:
        notes.append("no preferred batch sizes: pass --profiles FILE (`trtfarm profiles derive`)")
        return []
    if profiles_json(req.traffic.profiles) != ms[0].build.profiles:
        raise UserInputError("--profiles: that file's profiles are not the ones the released plans were built with; "
                             "pass the file the plans were built from")
    sizes = set()
    for p in ms[0].build.profiles:
        name, r = sorted(p.items())[0]
        step = (req.traffic.buckets.get(name) or [1])[0]
        sizes.add(-(-r["opt"][0] // step) * step)
    limit = min(r["max"][0] for p in ms[0].build.profiles for r in p.values())
    notes.append("preferred batch sizes: each profile's opt batch, in the traffic's buckets")
    return sorted(s for s in sizes if s <= limit)


def config_spec(req: TritonRequest, ms: Sequence[Manifest], notes: list[str]) -> ConfigSpec:
    """What the config of ``ms`` (the newest version's manifests) says; ``notes`` gets where each choice came from."""
    flavour = ms[0].target.flavour
    cc = {}
    for m in ms if served_by(flavour) == "tensorrt_plan" else ():  # the Python backend's model.py picks by GPU
        cc.setdefault(m.target.compute_capability, plan_file(m.target.gpu))
    groups = _groups(ms, req, notes)
    preferred = _preferred(ms, req, notes)
    header = [f"Written by `trtfarm triton {req.model}` from the released plans of "
              f"{', '.join(m.target.gpu for m in ms)} ({flavour} {ms[0].target.toolchain_version}).",
              "Rerun the command rather than editing: it checks every field against the plans."]
    if served_by(flavour) == "python":
        header.append(f"Triton's TensorRT backend cannot load {flavour} plans: the Python backend runs them through "
                      f"trtfarm's loader (model.py), which needs {REQUIREMENTS} in the image's Python.")
    spec = ConfigSpec(model=req.model, io=list(ms[0].plan.io), profiles=ms[0].build.profiles, flavour=flavour,
                      plan_files=cc, groups=groups, batching=req.batching, preferred_batch_sizes=preferred,
                      notes=header)
    cold = [i for i in range(len(spec.profiles)) if i not in spec.warmups()]
    if cold:
        notes.append(f"no warm-up for profile {', '.join(map(str, cold))}: another group refuses its shapes")
    return spec
