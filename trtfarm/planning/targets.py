"""Planning a matrix run: the model's identity, each target's build digest and key, and what this machine serves.

Nothing here builds. ``plan_targets`` is pure given its inputs, so the flows and ``trtfarm targets`` share it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import onnx

from trtfarm.errors import UserInputError
from trtfarm.identity import build_digest, graph_digest, onnx_digest, plan_prefix
from trtfarm.planning.fleet import Flavour, ResolvedTarget
from trtfarm.profiles.profile import Profile, profiles_json
from trtfarm.publishing.publish import MANIFEST_NAME
from trtfarm.toolchain.flavour import INSTALL_HINT, installed_version
from trtfarm.toolchain.header import version_matches
from trtfarm.workers.gpu import GpuScan, scan_gpus


@dataclass(frozen=True)
class ModelSource:
    """An ONNX export and its content addresses."""

    name: str
    path: Path
    source_uri: str
    onnx_digest: str
    graph_digest: str
    exported_at: str
    build_path: Path | None = None  # the precision-converted ONNX the builder parses (None: as exported)
    converted_digest: str | None = None
    precision: dict = field(default_factory=dict)  # manifest ``precision`` fields

    @property
    def plan_input(self) -> Path:
        """The ONNX the builder parses."""
        return self.build_path or self.path

    @property
    def plan_digest(self) -> str:
        """The digest that feeds build digests: of the converted ONNX."""
        return self.converted_digest or self.onnx_digest


def with_precision(store, model: ModelSource, recipe, calibration: Path | None, heldout: Path | None) -> ModelSource:
    """Run (or reuse from the store) the precision step; ``GateFailed`` when the gate refuses the conversion."""
    from trtfarm.precision import prepare_precision

    work = Path(tempfile.gettempdir()) / "trtfarm" / "converted" / model.name / model.onnx_digest[:12] / recipe.mode
    result = prepare_precision(store, model.name, model.path, model.onnx_digest, recipe, work,
                               calibration=calibration, heldout=heldout)
    info = {"recipe": recipe.mode, "recipe_detail": recipe.model_dump(mode="json"),
            "converted_onnx_digest": result.digest, "pinned_fp32_nodes": result.pinned,
            "accuracy": result.report.to_json() if recipe.mode != "fp32" else None,
            "gate": "passed" if result.report.passed else "not_run" if result.report.passed is None else "failed",
            "gate_detail": result.summary()}
    return replace(model, build_path=result.path, converted_digest=result.digest, precision=info)


def model_source(path: Path, name: str) -> ModelSource:
    """Check the ONNX loads and passes ``onnx.checker``; compute its digests. Bad files are user errors."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: no such ONNX file")
    try:
        onnx.checker.check_model(str(path))
    except Exception as err:  # DecodeError, ValidationError, ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserInputError(f"{path}: not a valid ONNX model ({type(err).__name__}: {first}). "
                             "Fix: re-export the model; check the file was copied completely.") from err
    exported = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="microseconds")
    return ModelSource(name, path, path.resolve().as_uri(), onnx_digest(path), graph_digest(path), exported)


@dataclass(frozen=True)
class Capabilities:
    """What this machine has: GPUs and importable toolchain versions."""

    gpus: GpuScan
    versions: dict[str, str | None] = field(default_factory=dict)


def local_capabilities() -> Capabilities:
    """Scan GPUs and import each toolchain flavour once."""
    return Capabilities(scan_gpus(), {f.value: installed_version(f.value) for f in Flavour})


def serve_check(target: ResolvedTarget, caps: Capabilities) -> str | None:
    """None when this machine can build ``target``; else the reason it cannot."""
    flavour, want = target.toolchain.flavour.value, target.toolchain.version
    have = caps.versions.get(flavour)
    if have is None:
        return f"`{flavour}` is not importable here; {INSTALL_HINT[flavour].replace('VERSION', want)}"
    if not version_matches(have, want):
        return f"installed {flavour} is {have}, the target needs {want}"
    if target.toolchain.flavour is Flavour.tensorrt_rtx:
        return None  # ahead-of-time build: no GPU needed
    names = [g.name for g in caps.gpus.gpus]
    if target.gpu.nvml_name not in names:
        return f"needs a {target.gpu.nvml_name} GPU to build on; this machine has {caps.gpus.describe()}"
    return None


@dataclass(frozen=True)
class TargetPlan:
    """One target of a run: its build digest, where its plan goes, and whether this machine can build it."""

    target: ResolvedTarget
    build_digest: str
    prefix: str
    skip_reason: str | None

    @property
    def manifest_key(self) -> str:
        """Where this build's manifest lives."""
        return f"{self.prefix}/{MANIFEST_NAME}"


def plan_targets(model: ModelSource, converted_digest: str, targets: Sequence[ResolvedTarget],
                 profiles: Sequence[Profile], caps: Capabilities | None) -> list[TargetPlan]:
    """Compute every target's build digest and plan key (keyed on its compatibility class).

    ``caps`` is this machine's (local mode: targets it cannot serve are skipped); None in farm mode, where each target
    goes to its pool's workers and they check themselves.
    """
    plans = []
    for t in targets:
        digest = build_digest(converted_onnx_digest=converted_digest, profiles=profiles_json(profiles),
                              settings=t.settings.model_dump(mode="json"), flavour=t.toolchain.flavour.value,
                              toolchain_version=t.toolchain.version, compat_class=t.compat_class)
        prefix = plan_prefix(model.name, model.onnx_digest, t.gpu_key, t.toolchain_label, digest)
        plans.append(TargetPlan(t, digest, prefix, serve_check(t, caps) if caps else None))
    return plans


def group_by_build(plans: Sequence[TargetPlan], by_pool: bool = False) -> list[list[TargetPlan]]:
    """Targets that share a build digest (one compatibility class) are built once: group them, order kept.

    ``by_pool`` (farm mode) splits a group by work pool too: each pool builds the class once on its own workers, so
    every target's plan is built and checked on a worker of its own GPU model.
    """
    groups: dict[tuple[str, str], list[TargetPlan]] = {}
    for p in plans:
        groups.setdefault((p.build_digest, p.target.gpu.pool if by_pool else ""), []).append(p)
    return list(groups.values())
