"""The fleet: toolchains, GPU models and build targets from ``gpu_targets.yaml``.

A target is one GPU model x one toolchain version. Each target resolves to the builder settings it builds with and
to its *compatibility class*: the set of GPU models one plan can serve. TensorRT's default plans serve one GPU model;
``same_compute_capability`` serves every GPU of that compute capability; TensorRT-RTX plans are portable across
compute capabilities 8.0/8.6/8.9/12.x by default, so one RTX build serves the whole RTX fleet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from trtfarm.layout import toolchain_label
from trtfarm.machine.gpu_ids import RTX_COMPUTE_CAPABILITIES, mig_problem, pci_id
from trtfarm.yamlfile import LocatedValueError

# The TensorRT versions whose code path the suite checks against NVIDIA's own Python bindings of that version (the
# PyPI wheel named here; tools/apicheck/ in the repository): API names and signatures, not TensorRT's behaviour. The
# fleet's `tensorrt` toolchains (gpu_targets.yaml) should name one of these; a manifest claims the check only for them.
TENSORRT_BINDINGS = {"10.16.1.11": "tensorrt-cu12-bindings", "11.4.0.106": "tensorrt-cu13-bindings"}


def bindings_api_check(flavour: Flavour | str, version: str) -> tuple[bool | None, str]:
    """Whether a toolchain's code path is checked against its version's bindings API: (True, how) or (None, why not).

    True only for a ``tensorrt`` version in ``TENSORRT_BINDINGS``: the suite checks exactly those (names and
    signatures of every TensorRT call in trtfarm, and the TensorRT-only paths driven through stand-ins).
    """
    if Flavour(flavour) is not Flavour.tensorrt:
        return None, "TensorRT-RTX: built for real here and in CI; the bindings API check covers tensorrt"
    if version in TENSORRT_BINDINGS:
        return True, (f"code path checked against the tensorrt {version} bindings API ({TENSORRT_BINDINGS[version]}"
                      f"=={version}): names and signatures, not TensorRT's behaviour")
    return None, (f"tensorrt {version} is not in the checked list ({', '.join(TENSORRT_BINDINGS)}): its API use "
                  "was not checked")
_ID = r"^[a-z0-9][a-z0-9._-]*$"


class Flavour(str, Enum):
    """Which TensorRT-family Python module builds the plan."""

    tensorrt = "tensorrt"
    tensorrt_rtx = "tensorrt_rtx"


class HardwareCompatibility(str, Enum):
    """``IBuilderConfig.hardware_compatibility_level``, by name."""

    none = "none"
    ampere_plus = "ampere_plus"
    same_compute_capability = "same_compute_capability"


class RefitMode(str, Enum):
    """Which refit builder flag a target opts into (``none``: not refittable)."""

    none = "none"
    refit = "refit"
    refit_identical = "refit_identical"
    refit_individual = "refit_individual"


MAX_WORKSPACE_MIB = 1 << 20  # 1 TiB: beyond any GPU's memory (and its bytes must fit TensorRT's int64 pool limit)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuilderSettings(_Strict):
    """Everything in ``IBuilderConfig`` that a target may set; each changes the plan, so all feed the build digest."""

    workspace_mib: int = Field(4096, ge=1, le=MAX_WORKSPACE_MIB,
                               description="WORKSPACE memory pool limit; too small silently drops tactics")
    optimization_level: int = Field(3, ge=0, le=5, description="builder_optimization_level (0 ignores timing cache)")
    tf32: bool = Field(True, description="TF32 math for FP32 matmul/conv; false for strict FP32")
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.none
    refit: RefitMode = RefitMode.none
    strip_plan: bool = Field(False, description="STRIP_PLAN: ship weights separately (needs a refit mode)")
    timing_cache: bool = Field(True, description="use the shared timing cache of (exact TensorRT build, GPU, TF32/"
                               "refit/hardware-compatibility flags); TensorRT-RTX has none")
    detailed_profiling: bool = Field(True, description="ProfilingVerbosity.DETAILED, for tactic names")

    @model_validator(mode="after")
    def _strip_needs_refit(self) -> BuilderSettings:
        if self.strip_plan and self.refit is RefitMode.none:
            raise ValueError("strip_plan needs a refit mode: set refit: refit_identical (or refit) as well")
        return self


class SettingsOverride(_Strict):
    """Per-target overrides of ``defaults``; every field optional."""

    workspace_mib: int | None = Field(None, ge=1, le=MAX_WORKSPACE_MIB)
    optimization_level: int | None = Field(None, ge=0, le=5)
    tf32: bool | None = None
    hardware_compatibility: HardwareCompatibility | None = None
    refit: RefitMode | None = None
    strip_plan: bool | None = None
    timing_cache: bool | None = None
    detailed_profiling: bool | None = None


class ServingImage(_Strict):
    """An image that serves this toolchain's plans (a tritonserver tag, say), with the TensorRT version it carries.

    ``trtfarm triton`` and ``trtfarm pull`` refuse a plan whose TensorRT version is not this one: a plan runs only
    with the TensorRT version that built it.
    """

    image: str = Field(min_length=1, description="the serving image, e.g. nvcr.io/nvidia/tritonserver:26.10-py3")
    tensorrt_version: str = Field(pattern=r"^\d+\.\d+\.\d+(\.\d+)?$",
                                  description="the TensorRT version inside the image (read it there: "
                                  "python -c 'import tensorrt; print(tensorrt.__version__)')")
    flavour: Flavour | None = Field(None, description="the image's TensorRT flavour (default: the toolchain's)")


class Toolchain(_Strict):
    """One toolchain version, the worker image that carries it, and the images that serve its plans."""

    flavour: Flavour
    version: str = Field(pattern=r"^\d+\.\d+\.\d+(\.\d+)?$", description="exact version, e.g. 11.4.0.106")
    image: str | None = Field(None, description="worker image with this toolchain installed (repo:tag)")
    base_image: str | None = Field(None, description="image `trtfarm images build` builds on: NVIDIA's TensorRT "
                                   "image of this version, or a Python image for TensorRT-RTX (pip-installed)")
    serving_images: list[ServingImage] = Field(default_factory=list, description="images that serve these plans; "
                                               "a plan whose TensorRT version differs is refused by triton and pull")


PciId = Annotated[str, BeforeValidator(pci_id)]
MIG_PROFILE = r"^\d+g\.\d+gb(\+me)?$"


class Gpu(_Strict):
    """One GPU model of the fleet (or one MIG slice of it) and the work pool whose workers have it."""

    nvml_name: str = Field(description="the name NVML reports, e.g. 'NVIDIA H100 80GB HBM3'")
    pci_ids: list[PciId] = Field(default_factory=list, description="PCI device ids of this model (vendor 10de), e.g. "
                                 "[\"0x2330\"]: what tells siblings apart; none: matched by name and compute "
                                 "capability")
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    memory_gib: float = Field(gt=0)
    pool: str = Field(pattern=_ID)
    count: int = Field(1, ge=1, description="GPUs of this model serving the pool (its concurrency limit)")
    mig: str | None = Field(None, pattern=MIG_PROFILE, description="a MIG profile (1g.10gb): the pool's workers run "
                            "on MIG instances of this profile, and its plans load only on one")

    @model_validator(mode="after")
    def _mig_exists(self) -> Gpu:
        problem = self.mig and mig_problem(self.nvml_name, self.mig)
        if problem:
            raise LocatedValueError(problem, ("mig",))
        return self


class Target(_Strict):
    """One build target: a GPU model x a toolchain."""

    id: str = Field(pattern=_ID)
    gpu: str
    toolchain: str
    release_on: Literal["engine", "built"] = Field("engine", description="verification a release pointer needs")
    determinism_check: bool = Field(False, description="build twice and compare (plan bytes; tactics on GPUs)")
    max_p99_increase: float = Field(0.05, ge=0, description="latency regression gate against the previous release")
    settings: SettingsOverride = SettingsOverride()
    serves: list[str] = Field(default_factory=list, description="a declared group: the fleet GPUs this target's plan "
                              "also serves (siblings of its GPU, e.g. [h100-pcie, h100-nvl]); the manifest lists "
                              "every id it serves")
    mig: str | None = Field(None, pattern=MIG_PROFILE, description="a MIG profile to build and validate for "
                            "(default: the GPU's mig)")


class FleetSigning(_Strict):
    """Signing and verification for the fleet; ``TRTFARM_SIGNING_KEY`` / ``TRTFARM_TRUSTED_KEYS`` win over these."""

    key: str | None = Field(None, min_length=1, description="PEM private key (ECDSA P-256) workers sign with: a path "
                            "on the worker; a relative path is relative to this file")
    trusted_keys: list[str] = Field(default_factory=list, description="PEM public keys that verify, pull, triton and "
                                    "load_plan accept (several during a key rotation)")


class Fleet(_Strict):
    """The whole ``gpu_targets.yaml``."""

    version: Literal[1] = 1
    toolchains: dict[str, Toolchain]
    gpus: dict[str, Gpu]
    targets: list[Target] = Field(min_length=1)
    defaults: BuilderSettings = BuilderSettings()
    signing: FleetSigning = FleetSigning()

    @field_validator("toolchains", "gpus")
    @classmethod
    def _keys_are_ids(cls, value: dict) -> dict:
        bad = [k for k in value if not re.fullmatch(_ID, k)]
        if bad:
            raise ValueError(f"names {bad} must be lowercase letters, digits, '.', '_' or '-'")
        return value

    @model_validator(mode="after")
    def _pci_ids_are_one_gpus(self) -> Fleet:
        owner: dict[tuple[str, str | None], str] = {}
        for key, gpu in self.gpus.items():
            for j, pid in enumerate(gpu.pci_ids):
                other = owner.setdefault((pid, gpu.mig), key)
                if other != key:
                    raise LocatedValueError(f"PCI id {pid} is declared by GPU {other!r} too: one GPU model per id; "
                                            "to share plans between two GPU models, list both in a target's serves:",
                                            ("gpus", key, "pci_ids", j))
        return self

    @model_validator(mode="after")
    def _references_resolve(self) -> Fleet:
        seen: dict[str, int] = {}
        pairs: dict[tuple[str, str], str] = {}
        for i, t in enumerate(self.targets):
            if t.id in seen:
                raise LocatedValueError(f"duplicate target id {t.id!r} (also targets[{seen[t.id]}]); "
                                        "give each target its own id", ("targets", i, "id"))
            seen[t.id] = i
            if t.gpu not in self.gpus:
                raise LocatedValueError(f"target {t.id!r}: unknown GPU {t.gpu!r}; declare it under gpus: "
                                        f"or use one of {sorted(self.gpus)}", ("targets", i, "gpu"))
            if t.toolchain not in self.toolchains:
                raise LocatedValueError(f"target {t.id!r}: unknown toolchain {t.toolchain!r}; declare it under "
                                        f"toolchains: or use one of {sorted(self.toolchains)}",
                                        ("targets", i, "toolchain"))
            if (t.gpu, t.toolchain) in pairs:
                raise LocatedValueError(f"target {t.id!r}: duplicate target, same GPU and toolchain as "
                                        f"{pairs[t.gpu, t.toolchain]!r}; remove one", ("targets", i))
            pairs[t.gpu, t.toolchain] = t.id
            self._check_group(i, t)
            try:
                resolve_target(self, t)
            except ValueError as err:
                raise LocatedValueError(str(err), ("targets", i)) from err
        return self


    def _check_group(self, i: int, t: Target) -> None:
        """A target's ``serves:`` names fleet GPUs of its compute capability; its ``mig:`` exists on its GPU."""
        gpu = self.gpus[t.gpu]
        if t.mig and gpu.mig and t.mig != gpu.mig:
            raise LocatedValueError(f"target {t.id!r}: mig {t.mig} differs from GPU {t.gpu!r}'s mig {gpu.mig}; "
                                    "keep one", ("targets", i, "mig"))
        problem = t.mig and mig_problem(gpu.nvml_name, t.mig)
        if problem:
            raise LocatedValueError(f"target {t.id!r}: {problem}", ("targets", i, "mig"))
        for j, key in enumerate(t.serves):
            if key not in self.gpus:
                raise LocatedValueError(f"target {t.id!r}: serves names unknown GPU {key!r}; declare it under gpus: "
                                        f"or use one of {sorted(self.gpus)}", ("targets", i, "serves", j))
            member = self.gpus[key]
            if member.compute_capability != gpu.compute_capability or member.mig != (t.mig or gpu.mig):
                raise LocatedValueError(f"target {t.id!r}: serves {key!r} ({member.nvml_name}, cc "
                                        f"{member.compute_capability}{', MIG ' + member.mig if member.mig else ''}), "
                                        f"which cannot run a plan for {gpu.nvml_name} (cc {gpu.compute_capability}"
                                        f"{', MIG ' + (t.mig or gpu.mig) if t.mig or gpu.mig else ''}); a group "
                                        "holds siblings of one compute capability (and MIG profile)",
                                        ("targets", i, "serves", j))


@dataclass(frozen=True)
class ResolvedTarget:
    """A target with its GPU, toolchain and effective settings looked up."""

    id: str
    gpu_key: str
    gpu: Gpu
    toolchain_key: str
    toolchain: Toolchain
    settings: BuilderSettings
    compat_class: str
    release_on: str
    determinism_check: bool = False
    max_p99_increase: float = 0.05
    mig: str | None = None  # the MIG profile it builds and validates for (the target's, else its GPU's)
    group: tuple[tuple[str, Gpu], ...] = ()  # the other fleet GPUs its plan serves (``serves:``), by key

    @property
    def serves_pci_ids(self) -> list[str]:
        """Every PCI id this target's plan serves: its GPU's, then its group's."""
        ids = [*self.gpu.pci_ids, *(pid for _, g in self.group for pid in g.pci_ids)]
        return list(dict.fromkeys(ids))

    @property
    def toolchain_label(self) -> str:
        """``tensorrt-11.4.0.106`` / ``tensorrt_rtx-1.7.1.116``, as used in keys."""
        return toolchain_label(self.toolchain.flavour.value, self.toolchain.version)


def compat_class(flavour: Flavour, gpu_key: str, gpu: Gpu, hw: HardwareCompatibility, mig: str | None = None) -> str:
    """Return the name of the set of GPU models that one plan for this target can run on.

    A MIG profile is another device to TensorRT (its own SMs and memory): a target that builds for one has its own
    class, ``<class>@<profile>`` (``rtx-portable@1g.10gb``), so its build digest differs from the whole GPU's and
    one plan never stands for the other. Without a profile the class (and every digest) is as before.
    """
    base = _class_of_gpu(flavour, gpu_key, gpu, hw)
    return f"{base}@{mig}" if mig else base


def _class_of_gpu(flavour: Flavour, gpu_key: str, gpu: Gpu, hw: HardwareCompatibility) -> str:
    if flavour is Flavour.tensorrt_rtx:
        if gpu.compute_capability not in RTX_COMPUTE_CAPABILITIES and not gpu.compute_capability.startswith("12."):
            raise ValueError(f"GPU {gpu_key!r} has compute capability {gpu.compute_capability}; TensorRT-RTX plans "
                             f"run on {', '.join(RTX_COMPUTE_CAPABILITIES)}/12.x only: use a tensorrt toolchain")
        if hw is HardwareCompatibility.same_compute_capability:  # runs only where the capability is the GPU's
            return f"rtx-sm{gpu.compute_capability.replace('.', '')}"
        return "rtx-portable" if hw is HardwareCompatibility.none else f"rtx-{hw.value}"
    if hw is HardwareCompatibility.same_compute_capability:
        return f"sm{gpu.compute_capability.replace('.', '')}"
    if hw is HardwareCompatibility.ampere_plus:
        if float(gpu.compute_capability) < 8.0:
            raise ValueError(f"GPU {gpu_key!r} (compute capability {gpu.compute_capability}) is older than Ampere: "
                             "ampere_plus needs 8.0 or newer")
        return "ampere-plus"
    return gpu_key


def resolve_target(fleet: Fleet, target: Target) -> ResolvedTarget:
    """Look up a target's GPU and toolchain and merge its settings over the fleet defaults."""
    gpu, tc = fleet.gpus[target.gpu], fleet.toolchains[target.toolchain]
    merged = {**fleet.defaults.model_dump(), **target.settings.model_dump(exclude_none=True)}
    try:
        settings = BuilderSettings.model_validate(merged)
        cls = compat_class(tc.flavour, target.gpu, gpu, settings.hardware_compatibility, target.mig or gpu.mig)
    except ValueError as err:
        raise ValueError(f"target {target.id!r}: {err}") from err
    group = tuple((k, fleet.gpus[k]) for k in dict.fromkeys(target.serves) if k != target.gpu)
    return ResolvedTarget(target.id, target.gpu, gpu, target.toolchain, tc, settings, cls, target.release_on,
                          target.determinism_check, target.max_p99_increase, target.mig or gpu.mig, group)


def select_targets(fleet: Fleet, ids: list[str] | None = None) -> list[ResolvedTarget]:
    """Resolve the targets named by ``ids`` (all when empty); an unknown id is a user error naming the known ones."""
    by_id = {t.id: t for t in fleet.targets}
    unknown = [i for i in ids or [] if i not in by_id]
    if unknown:
        from trtfarm.errors import UserInputError
        from trtfarm.nearest import did_you_mean

        raise UserInputError(f"unknown target(s) {unknown}; {did_you_mean(unknown[0], by_id)}known targets: "
                             f"{', '.join(by_id)}")
    chosen = [by_id[i] for i in ids] if ids else fleet.targets
    return [resolve_target(fleet, t) for t in chosen]
