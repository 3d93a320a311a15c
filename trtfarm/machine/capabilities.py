"""This machine's capabilities: its GPUs and the toolchain versions it can import (each flavour imported once)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtfarm.machine.flavour import MODULES, installed_version
from trtfarm.machine.gpu import GpuScan, scan_gpus


@dataclass(frozen=True)
class Capabilities:
    """What this machine has: GPUs and importable toolchain versions."""

    gpus: GpuScan
    versions: dict[str, str | None] = field(default_factory=dict)


def local_capabilities() -> Capabilities:
    """Scan GPUs and import each toolchain flavour once."""
    return Capabilities(scan_gpus(), {f: installed_version(f) for f in MODULES})


