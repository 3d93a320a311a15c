"""Does a local device serve a target (or a plan's manifest)? By PCI device id where one is declared.

One rule for the worker's self-check, ``trtfarm targets``, ``verify``, ``pull`` (which fleet GPU this host is:
``best_key``) and ``load_plan``:

- a MIG instance serves only a target of its profile, and a whole GPU only a target of no profile;
- a plan of a portable class (TensorRT-RTX's default, ``same_compute_capability``, ``ampere_plus``) serves by
  compute capability, whatever the model;
- otherwise the device's PCI device id must be one its target declares (``exact``), or one of a GPU its target's
  ``serves:`` group names (``group``); a sibling (same compute capability, another id) is refused with the reason;
- where the target declares no PCI id (or NVML gives none), NVML name and compute capability decide (``name``), and
  the verdict says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.machine.gpu_ids import RTX_COMPUTE_CAPABILITIES


@dataclass(frozen=True)
class GroupMember:
    """A GPU that a target's ``serves:`` group names: its fleet key, NVML name and PCI ids."""

    key: str
    name: str
    pci_ids: tuple[str, ...]


@dataclass(frozen=True)
class DeviceSpec:
    """The device a plan is for: a fleet GPU (its ids and MIG profile), its group, and the plan's class."""

    key: str
    name: str
    compute_capability: str
    pci_ids: tuple[str, ...]
    compat_class: str
    mig: str | None = None
    group: tuple[GroupMember, ...] = ()

    def describe(self) -> str:
        """``NVIDIA H100 PCIe (PCI 0x2331, cc 9.0)``."""
        pci = f"PCI {'/'.join(self.pci_ids)}, " if self.pci_ids else ""
        return f"{self.name} ({pci}cc {self.compute_capability}{f', MIG {self.mig}' if self.mig else ''})"


@dataclass(frozen=True)
class Fit:
    """One device against one spec: ``how`` it serves (exact, group, name, class) or ``no``, and why."""

    how: str
    reason: str
    device: LocalGpu | None = None

    @property
    def ok(self) -> bool:
        """True when the device serves the spec."""
        return self.how != "no"


def _portable(spec: DeviceSpec, gpu: LocalGpu) -> Fit | None:
    cls, cc = spec.compat_class.split("@")[0], gpu.compute_capability  # its MIG profile: _mig checked it
    rtx = cc in RTX_COMPUTE_CAPABILITIES or cc.startswith("12.")
    if cls in ("rtx-portable", "rtx-ampere_plus"):  # every capability TensorRT-RTX runs on is Ampere or newer
        ok = rtx
    elif cls.startswith("rtx-sm") and cls[6:].isdigit():
        ok = rtx and cls == f"rtx-sm{cc.replace('.', '')}"
    elif cls.startswith("sm") and cls[2:].isdigit():
        ok = cls == f"sm{cc.replace('.', '')}"
    elif cls == "ampere-plus":
        ok = float(cc) >= 8.0
    else:
        return None
    return Fit("class" if ok else "no", f"class {cls} {'serves' if ok else 'does not serve'} compute capability "
               f"{cc}", gpu)


def _mig(spec: DeviceSpec, gpu: LocalGpu) -> Fit | None:
    """A refusal when the device is a MIG instance and the plan not for its profile, or the other way round."""
    have = gpu.mig.profile if gpu.mig else None
    if have == spec.mig:
        return None
    if spec.mig and not have:
        return Fit("no", f"the plan is for MIG {spec.mig} instances of {spec.name}; {gpu.describe()} is a whole GPU "
                   "(run it on a MIG instance of that profile)", gpu)
    if spec.mig:
        return Fit("no", f"the plan is for MIG {spec.mig} instances; this device is a MIG {have} instance "
                   f"({gpu.mig.sm_count} SMs, {gpu.mig.memory_gib:.1f} GiB): another device to TensorRT", gpu)
    return Fit("no", f"{gpu.describe()} is a MIG {have} instance ({gpu.mig.sm_count} SMs, {gpu.mig.memory_gib:.1f} "
               f"GiB), another device to TensorRT than the whole {spec.name} the plan is for; declare a target with "
               f"mig: {have}", gpu)


def fit(spec: DeviceSpec, gpu: LocalGpu) -> Fit:
    """Whether ``gpu`` serves ``spec``, and how or why not."""
    refused = _mig(spec, gpu)
    if refused:
        return refused
    portable = _portable(spec, gpu)
    if portable:
        return portable
    if spec.pci_ids and gpu.pci_device_id:
        return _by_pci_id(spec, gpu)
    why = "the target declares no PCI id" if not spec.pci_ids else "NVML reports no PCI id for this device"
    names = {spec.name} | {m.name for m in spec.group}
    if gpu.name in names and gpu.compute_capability == spec.compute_capability:
        return Fit("name", f"matched by NVML name and compute capability ({why})", gpu)
    return Fit("no", f"{gpu.describe()} is not {spec.describe()} (matched by name and compute capability: {why})",
               gpu)


def _by_pci_id(spec: DeviceSpec, gpu: LocalGpu) -> Fit:
    pid = gpu.pci_device_id
    if pid in spec.pci_ids:
        return Fit("exact", f"PCI {pid} is {spec.key or spec.name}'s", gpu)
    member = next((m for m in spec.group if pid in m.pci_ids), None)
    if member:
        return Fit("group", f"PCI {pid} is {member.key}'s, which the plan serves through the declared group "
                   f"(serves: {', '.join([spec.key, *(m.key for m in spec.group)])})", gpu)
    if gpu.compute_capability == spec.compute_capability:
        return Fit("no", f"{gpu.describe()} is a sibling of {spec.describe()}: the same compute capability, another "
                   "device model, and plans are tuned per model. Build for its own target, or declare the group "
                   "(a target's serves: lists both GPUs)", gpu)
    return Fit("no", f"{gpu.describe()} is not {spec.describe()}", gpu)


RANK = {"exact": 0, "group": 1, "class": 2, "name": 3, "no": 4}


def best_fit(spec: DeviceSpec, scan: GpuScan) -> Fit:
    """The best local device for ``spec`` (exact, then group, class, name), or the first refusal."""
    fits = sorted((fit(spec, g) for g in scan.gpus), key=lambda f: RANK[f.how])
    if not fits:
        return Fit("no", f"this machine has {scan.describe()}")
    return fits[0]


def best_key(specs: Mapping[str, DeviceSpec], scan: GpuScan) -> str | None:
    """The key of the spec a local device serves best (exact, then group, class, name; the first listed of a rank).

    None when no device serves any: how ``pull`` finds which fleet GPU this host is, by the rule ``verify`` and the
    worker's self-check hold each plan and target to.
    """
    ranked = sorted((RANK[best_fit(spec, scan).how], i, key) for i, (key, spec) in enumerate(specs.items()))
    return next((key for rank, _, key in ranked if rank < RANK["no"]), None)
