"""This machine's capabilities: its GPUs and the toolchain versions it can import, each looked up when first asked.

A run whose targets are all TensorRT-RTX (built ahead of time on the CPU) never loads NVML, and never imports a
toolchain flavour it has no target of.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property

from trtfarm.machine.flavour import MODULES, installed_version
from trtfarm.machine.gpu import GpuScan, scan_gpus


class _Versions(Mapping):
    """Flavour -> installed version (None when it does not import); a flavour is imported on its first lookup."""

    def __init__(self) -> None:
        self._found: dict[str, str | None] = {}

    def __getitem__(self, flavour: str) -> str | None:
        if flavour not in MODULES:
            raise KeyError(flavour)
        if flavour not in self._found:
            self._found[flavour] = installed_version(flavour)
        return self._found[flavour]

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)

    def __repr__(self) -> str:
        return repr(dict(self))


class Capabilities:
    """What this machine has: GPUs (``gpus``, scanned on first use) and importable toolchain versions."""

    def __init__(self, gpus: GpuScan | None = None, versions: Mapping[str, str | None] | None = None) -> None:
        if gpus is not None:
            self.__dict__["gpus"] = gpus
        self.versions: Mapping[str, str | None] = versions if versions is not None else _Versions()

    @cached_property
    def gpus(self) -> GpuScan:
        """The local GPUs as NVML reports them."""
        return scan_gpus()


def local_capabilities() -> Capabilities:
    """This machine's capabilities, each probed when first asked (each toolchain flavour imported once)."""
    return Capabilities()


def fleet_scan(caps: Capabilities | None = None) -> tuple[list[tuple], Mapping[str, str | None]]:
    """What the built-in fleet is named from: this machine's GPUs, and the toolchain versions that import here.

    Each GPU is (NVML name, compute capability, GiB, PCI id, MIG profile); ``vocabulary/machine_fleet.py`` names
    the fleet from them.
    """
    caps = caps or local_capabilities()
    return [(g.name, g.compute_capability, g.memory_gib, g.pci_device_id, g.mig.profile if g.mig else None)
            for g in caps.gpus.gpus], caps.versions
