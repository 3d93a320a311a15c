"""What a manifest says of GPUs: every fleet GPU a plan serves (with PCI ids) and the device it was built on."""

from __future__ import annotations

from trtfarm.vocabulary.fleet import Flavour
from trtfarm.vocabulary.manifest import DeviceInfo, ServedGpu
from trtfarm.vocabulary.targets import TargetWork


def served_gpus(plan: TargetWork) -> list[ServedGpu]:
    """Every fleet GPU the target's plan serves (its own, then its declared group), with their PCI ids."""
    t = plan.target
    return [ServedGpu(gpu=k, gpu_name=g.nvml_name, pci_ids=list(g.pci_ids)) for k, g in ((t.gpu_key, t.gpu), *t.group)]


def build_device(plan: TargetWork) -> DeviceInfo | None:
    """The local device a TensorRT build ran and was validated on (the one serving its target).

    None for builds ahead of time (TensorRT-RTX) and where no local device serves it.
    """
    if plan.target.toolchain.flavour is not Flavour.tensorrt:
        return None
    from trtfarm.machine.gpu import scan_gpus
    from trtfarm.machine.match import best_fit
    from trtfarm.vocabulary.device_spec import spec_of_target

    found = best_fit(spec_of_target(plan.target), scan_gpus())
    g = found.device if found.ok else None
    if g is None:
        return None
    return DeviceInfo(name=g.name, pci_device_id=g.pci_device_id, pci_subsystem_id=g.pci_subsystem_id,
                      compute_capability=g.compute_capability, memory_gib=round(g.memory_gib, 2),
                      sm_count=g.sm_count, ecc=g.ecc, mig=g.mig.profile if g.mig else None)
