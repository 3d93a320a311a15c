"""The device a fleet target, or a published plan's manifest, is for: the spec ``machine.match`` judges devices by."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtfarm.machine.match import DeviceSpec, GroupMember

if TYPE_CHECKING:
    from trtfarm.vocabulary.fleet import ResolvedTarget
    from trtfarm.vocabulary.manifest import Manifest


def spec_of_target(t: ResolvedTarget) -> DeviceSpec:
    """The device a fleet target builds for."""
    group = tuple(GroupMember(k, g.nvml_name, tuple(g.pci_ids)) for k, g in t.group)
    return DeviceSpec(t.gpu_key, t.gpu.nvml_name, t.gpu.compute_capability, tuple(t.gpu.pci_ids), t.compat_class,
                      t.mig, group)


def spec_of_manifest(m: Manifest) -> DeviceSpec:
    """The device a published plan is for, as its manifest records it."""
    t = m.target
    group = tuple(GroupMember(s.gpu, s.gpu_name, tuple(s.pci_ids)) for s in t.serves if s.gpu != t.gpu)
    return DeviceSpec(t.gpu, t.gpu_name, t.compute_capability, tuple(t.pci_ids), t.compat_class, t.mig, group)
