"""The manifest published beside every plan: a versioned pydantic schema, JSON on disk.

TensorRT enums are stored by *name* (``"SAME_COMPUTE_CAPABILITY"``, ``"REFIT_IDENTICAL"``): their integer values
changed between 10.x and 11.x. Readers upgrade older documents through ``_UPGRADES`` and refuse newer ones.
This module imports no build code.

Schema 2 added the network's I/O tensors as the builder saw them (``plan.io``), the serving images the target's
toolchain declares (``target.serving_images``), every file of the model (``model.files``) and the bindings API
check (``verification.api``); a schema 1 manifest reads as schema 2 with none of them recorded.

Schema 3 added the GPU identity: the PCI device ids the plan serves (``target.pci_ids``, its GPU's, and
``target.serves``, every GPU of its declared group), its MIG profile (``target.mig``), and the device the worker built
and validated it on (``build.device``); a schema 2 manifest reads as schema 3 serving its one GPU, ids unknown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtfarm import __version__
from trtfarm.errors import UserInputError

SCHEMA_VERSION = 3
CheckStatus = Literal["passed", "failed", "pending", "not_run"]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelFile(_Doc):
    """One file of the export: the ONNX file, or an external data file its tensors reference."""

    name: str = Field(description="relative to the model's folder")
    sha256: str


class ModelInfo(_Doc):
    """The exported model this plan came from."""

    name: str
    source_uri: str
    onnx_digest: str
    graph_digest: str
    files: list[ModelFile] = Field(default_factory=list, description="every file onnx_digest covers, in its order")
    exported_at: str | None = Field(None, description="when the export was written (ISO 8601, UTC): orders exports")


class PrecisionInfo(_Doc):
    """How the ONNX was converted before the build (``fp32``: used as exported)."""

    recipe: str = "fp32"
    converted_onnx_digest: str
    pinned_fp32_nodes: list[str] = []
    accuracy: dict | None = None


class ServingImageInfo(_Doc):
    """An image declared (in gpu_targets.yaml) to serve this plan, and the TensorRT it carries."""

    image: str
    flavour: str = Field(description="tensorrt or tensorrt_rtx")
    tensorrt_version: str


class ServedGpu(_Doc):
    """A fleet GPU this plan serves: its key, NVML name and PCI device ids (empty: not declared)."""

    gpu: str
    gpu_name: str
    pci_ids: list[str] = Field(default_factory=list)


class DeviceInfo(_Doc):
    """The device a worker built and validated a plan on, as NVML reported it."""

    name: str
    pci_device_id: str | None = None
    pci_subsystem_id: str | None = None
    compute_capability: str
    memory_gib: float
    sm_count: int | None = None
    ecc: bool | None = None
    mig: str | None = Field(None, description="the MIG profile of the instance, None on a whole GPU")


class TargetInfo(_Doc):
    """Where the plan runs."""

    target_id: str
    gpu: str
    gpu_name: str
    compute_capability: str
    compat_class: str
    flavour: str
    toolchain_version: str
    hardware_compatibility_level: str = Field(description="HardwareCompatibilityLevel name")
    version_compatible: bool = False
    refittable: bool = False
    builder_flags: list[str] = Field(default_factory=list, description="BuilderFlag names set")
    serving_images: list[ServingImageInfo] = Field(default_factory=list,
                                                   description="what the toolchain declared at build time")
    pci_ids: list[str] = Field(default_factory=list, description="the target GPU's PCI device ids (empty: matched "
                               "by name and compute capability)")
    serves: list[ServedGpu] = Field(default_factory=list, description="every fleet GPU the plan serves: its own, "
                                    "then its declared group's")
    mig: str | None = Field(None, description="the MIG profile the plan is for (None: a whole GPU)")


class TimingCacheInfo(_Doc):
    """The shared timing cache around this build.

    ``*_before``: the shared object it pulled; ``*_after``: the builder's own cache after the build (merged into the
    shared object once the plan is published, best effort).
    """

    used: bool
    reason: str | None = None
    key: str | None = None
    entries_before: int | None = None
    entries_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None


class BuildInfo(_Doc):
    """How the plan was built, enough to rebuild it."""

    build_digest: str
    profiles: list[dict]
    settings: dict
    wall_s: float
    built_for_target: str = Field(description="the target whose build produced these bytes (shared classes)")
    timing_cache: TimingCacheInfo
    worker_host: str
    flow_run_id: str | None = None
    reproduce: str = Field(description="a command that rebuilds this plan")
    device: DeviceInfo | None = Field(None, description="the GPU it was built and validated on (None: built ahead "
                                      "of time without one)")


class TensorIO(_Doc):
    """One I/O tensor of the network, as the builder parsed it."""

    name: str
    mode: Literal["input", "output"]
    dtype: str = Field(description="DataType name (FLOAT, HALF, INT64, ...), never the enum's integer")
    shape: list[int] = Field(description="-1 for a dynamic dimension")


class PlanInfo(_Doc):
    """The stored plan."""

    key: str
    bytes: int
    sha256: str
    header_version: str | None = None
    device_memory_per_profile: list[int] | None = None
    tactics_digest: str | None = None
    tactics: dict[str, str] | None = Field(None, description="layer -> tactic, from the engine inspector")
    io: list[TensorIO] | None = Field(None, description="the network's I/O tensors (None: not recorded, schema 1)")


class Check(_Doc):
    """One verification step and what it found."""

    status: CheckStatus
    detail: str = ""
    figures: dict = {}


class Verification(_Doc):
    """What was checked, and what was not: ``onnx`` on CPU, ``built``, ``engine`` on the target GPU, and ``api``.

    ``api``: the target's TensorRT code path was checked against that version's own Python bindings (names and
    signatures, by trtfarm's suite); distinct from ``built`` and from the ``engine`` check on the GPU.
    """

    onnx: Check
    built: Check
    engine: Check
    api: Check


class Lineage(_Doc):
    """Where this plan came from when it was not a fresh build (refits)."""

    parent_manifest: str | None = None


class Manifest(_Doc):
    """Everything a reader needs to trust, load or rebuild one plan."""

    schema_version: Literal[3] = SCHEMA_VERSION
    trtfarm_version: str = __version__
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model: ModelInfo
    precision: PrecisionInfo
    target: TargetInfo
    build: BuildInfo
    plan: PlanInfo
    verification: Verification
    lineage: Lineage = Lineage()

    def to_json(self) -> bytes:
        """Serialise with stable key order."""
        return (self.model_dump_json(indent=2) + "\n").encode()

    def same_build(self, other: Manifest) -> bool:
        """True when both describe the same build of the same model for the same target GPU."""
        return (self.build.build_digest == other.build.build_digest
                and self.model.onnx_digest == other.model.onnx_digest and self.target.gpu == other.target.gpu)


def _from_v1(doc: dict) -> dict:
    """Schema 1 -> 2: nothing recorded the I/O tensors, serving images, model files or the bindings API check then.

    The first three stay unknown; ``verification.api`` says it was not run.
    """
    api = {"status": "not_run", "detail": "manifest written before trtfarm recorded the bindings API check"}
    return {**doc, "schema_version": 2, "verification": {**doc.get("verification", {}), "api": api}}


def _from_v2(doc: dict) -> dict:
    """Schema 2 -> 3: the plan serves the one GPU it names; its PCI ids, MIG profile and build device are unknown."""
    target = doc["target"]
    served = {"gpu": target["gpu"], "gpu_name": target["gpu_name"], "pci_ids": []}
    return {**doc, "schema_version": 3, "target": {**target, "serves": [served]}}


_UPGRADES: dict[int, Callable[[dict], dict]] = {1: _from_v1, 2: _from_v2}  # from_version -> the next version's document


class ManifestInvalid(UserInputError):
    """Bytes that are not a trtfarm manifest (not JSON, not an object, fields missing or of the wrong type)."""


def validation_problems(err: ValidationError, limit: int = 3) -> str:
    """A pydantic error in one line: ``field.path: message`` for the first few problems."""
    items = [f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in err.errors()]
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def manifest_from_json(data: bytes | str, source: str = "manifest") -> Manifest:
    """Parse a manifest, upgrading older schema versions; a newer or broken one is a clear error.

    A manifest of this schema, as trtfarm writes it, is validated straight from its bytes (half the CPU of a fleet
    view's thousands); any other goes the long way, which upgrades it or says what is wrong.
    """
    try:
        m = Manifest.model_validate_json(data)
        if "schema_version" in m.model_fields_set:
            return m
    except ValidationError:
        pass
    try:
        doc = json.loads(data)
        version = int(doc.get("schema_version", 0))
    except (ValueError, AttributeError, TypeError) as err:
        raise ManifestInvalid(f"{source}: not a trtfarm manifest (not a JSON object: {err}).") from err
    if version > SCHEMA_VERSION:
        raise UserInputError(f"{source}: manifest schema {version} is newer than this trtfarm understands "
                             f"({SCHEMA_VERSION}); upgrade trtfarm.")
    while version < SCHEMA_VERSION:
        if version not in _UPGRADES:
            raise ManifestInvalid(f"{source}: manifest schema {version} cannot be upgraded; rebuild the plan.")
        try:
            doc = _UPGRADES[version](doc)
        except (KeyError, TypeError, AttributeError) as err:
            raise ManifestInvalid(f"{source}: not a trtfarm manifest of schema {version} (no {err}).") from err
        version = int(doc["schema_version"])
    try:
        return Manifest.model_validate(doc)
    except ValidationError as err:
        raise ManifestInvalid(f"{source}: not a valid trtfarm manifest: {validation_problems(err)}.") from err
