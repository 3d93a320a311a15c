"""Local GPU discovery through NVML (``nvidia-ml-py``). A machine with no driver has no GPUs, which is valid."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalGpu:
    """One GPU as NVML reports it."""

    index: int
    name: str
    compute_capability: str
    memory_gib: float


@dataclass(frozen=True)
class GpuScan:
    """What NVML found, and why nothing was found when that is the case."""

    gpus: tuple[LocalGpu, ...]
    driver: str | None
    reason: str | None = None

    def describe(self) -> str:
        """One line for people: the GPUs, or why there are none."""
        if not self.gpus:
            return f"no NVIDIA GPU ({self.reason})"
        return ", ".join(f"{g.name} (cc {g.compute_capability})" for g in self.gpus)


NVML_LIBRARY = "libnvidia-ml.so.1"  # what pynvml loads on Linux; the NVIDIA driver installs it


def _no_nvml_library() -> bool:
    """True on Linux when the driver's NVML library does not load: no GPU, known without importing pynvml.

    That is nvidia-ml-py's own verdict (its ``pynvml`` loads that library first), so it stands in for it only when
    the ``pynvml`` Python would import is the installed one: another (a stand-in on ``PYTHONPATH``) is asked itself.
    """
    if not sys.platform.startswith("linux"):
        return False
    import importlib.util

    spec = importlib.util.find_spec("pynvml")
    if spec is not None and spec.origin and Path(spec.origin).parent.name not in ("site-packages", "dist-packages"):
        return False
    import ctypes

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return True
    return False


def scan_gpus() -> GpuScan:
    """List the local NVIDIA GPUs; never raises."""
    if _no_nvml_library():  # pynvml's own verdict there (NVMLError_LibraryNotFound), at a fraction of its import
        return GpuScan((), None, "NVML unavailable: NVML Shared Library Not Found")
    try:
        import pynvml
    except ImportError:
        return GpuScan((), None, "nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return GpuScan((), None, f"NVML unavailable: {err}")
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append(LocalGpu(i, name.decode() if isinstance(name, bytes) else name, f"{major}.{minor}", mem))
        return GpuScan(tuple(gpus), driver.decode() if isinstance(driver, bytes) else driver,
                       None if gpus else "the driver reports no devices")
    finally:
        pynvml.nvmlShutdown()
