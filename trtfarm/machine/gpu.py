"""Local GPU discovery through NVML (``nvidia-ml-py``). A machine with no driver has no GPUs, which is valid."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MigInstance:
    """The MIG GPU instance a device is: its profile as NVML names it (without ``MIG ``), SMs and memory."""

    profile: str
    sm_count: int | None
    memory_gib: float


@dataclass(frozen=True)
class LocalGpu:
    """One GPU (or one MIG instance of a GPU) as NVML reports it; a field NVML could not give is None."""

    index: int
    name: str
    compute_capability: str
    memory_gib: float
    pci_device_id: str | None = None  # "0x2335" (the device part of NVML's pciDeviceId 0x233510DE)
    pci_vendor_id: str | None = None  # "0x10de"
    pci_subsystem_id: str | None = None  # NVML's pciSubSystemId as read: "0x18bf10de" (board, then its vendor)
    sm_count: int | None = None  # multiprocessors (NVML's attributes, else CUDA's)
    ecc: bool | None = None  # ECC mode now (None: the GPU has no ECC mode)
    mig_mode: bool | None = None  # MIG mode now (None: the GPU has no MIG mode)
    mig: MigInstance | None = None  # set when this device is a MIG instance
    sm_source: str | None = None  # where sm_count came from: "nvml" or "cuda"

    def describe(self) -> str:
        """``NVIDIA H200 (PCI 0x2335, cc 9.0)``, ``... MIG 1g.10gb`` for an instance."""
        pci = f"PCI {self.pci_device_id}, " if self.pci_device_id else ""
        mig = f", MIG {self.mig.profile}" if self.mig else ""
        return f"{self.name} ({pci}cc {self.compute_capability}{mig})"

    def identity(self) -> dict:
        """Everything known about the device, for JSON."""
        return {"index": self.index, "name": self.name, "pci_device_id": self.pci_device_id,
                "pci_vendor_id": self.pci_vendor_id, "pci_subsystem_id": self.pci_subsystem_id,
                "compute_capability": self.compute_capability, "memory_gib": round(self.memory_gib, 2),
                "sm_count": self.sm_count, "sm_source": self.sm_source, "ecc": self.ecc, "mig_mode": self.mig_mode,
                "mig": None if self.mig is None else {"profile": self.mig.profile, "sm_count": self.mig.sm_count,
                                                      "memory_gib": round(self.mig.memory_gib, 2)}}


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
        return ", ".join(g.describe() for g in self.gpus)


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
            gpus += _devices(pynvml, i, pynvml.nvmlDeviceGetHandleByIndex(i))
        return GpuScan(tuple(gpus), _text(driver), None if gpus else "the driver reports no devices")
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _asked(call, *args):
    """An NVML query that a GPU may not support (NVMLError_NotSupported): its result, or None."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _devices(pynvml, i: int, h) -> list[LocalGpu]:
    """GPU ``i``, or its MIG instances when MIG mode is on and some exist (CUDA then sees only those)."""
    from trtfarm.machine.gpu_ids import device_id_of, vendor_id_of

    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    ecc = _asked(pynvml.nvmlDeviceGetEccMode, h)
    mig = _asked(pynvml.nvmlDeviceGetMigMode, h)
    sms, source = _sm_count(pynvml, h, _text(pci.busId))
    whole = LocalGpu(i, _text(pynvml.nvmlDeviceGetName(h)), f"{major}.{minor}",
                     pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, device_id_of(pci.pciDeviceId),
                     vendor_id_of(pci.pciDeviceId), f"0x{pci.pciSubSystemId:08x}", sms,
                     None if ecc is None else ecc[0] == pynvml.NVML_FEATURE_ENABLED,
                     None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE, None, source)
    if not whole.mig_mode:
        return [whole]
    instances = []
    for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        mh = _asked(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
        if mh is not None:
            instances.append(_instance(pynvml, whole, h, mh))
    return instances or [whole]


def _instance(pynvml, whole: LocalGpu, parent, mh) -> LocalGpu:
    """One MIG instance: its parent's identity, its own SMs, memory and GPU instance profile."""
    from dataclasses import replace

    attrs = pynvml.nvmlDeviceGetAttributes(mh)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(parent, pynvml.nvmlDeviceGetGpuInstanceId(mh))
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(parent, pynvml.nvmlGpuInstanceGetInfo(gi).profileId)
    profile = _text(info.name).removeprefix("MIG ").strip()
    gib = attrs.memorySizeMB / 1024
    return replace(whole, memory_gib=gib, sm_count=attrs.multiprocessorCount, sm_source="nvml",
                   mig=MigInstance(profile, attrs.multiprocessorCount, gib))


def _sm_count(pynvml, h, bus_id: str) -> tuple[int | None, str | None]:
    """Multiprocessors of a whole GPU: NVML's device attributes where the driver gives them, else CUDA's."""
    attrs = _asked(pynvml.nvmlDeviceGetAttributes, h)
    if attrs is not None and attrs.multiprocessorCount:
        return int(attrs.multiprocessorCount), "nvml"
    sms = cuda_sm_count(bus_id)
    return (sms, "cuda") if sms else (None, None)


def cuda_sm_count(bus_id: str) -> int | None:
    """``CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`` of the CUDA device at this PCI bus id (driver API), or None."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return None
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    want = bus_id.lower().split(":", 1)[-1]  # NVML: 00000000:19:00.0, CUDA: 0000:19:00.0
    for i in range(count.value):
        dev, value, bus = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(64)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) or cuda.cuDeviceGetPCIBusId(bus, 64, dev):
            continue
        if bus.value.decode().lower().split(":", 1)[-1] == want and \
                cuda.cuDeviceGetAttribute(ctypes.byref(value), 16, dev) == 0:  # 16: MULTIPROCESSOR_COUNT
            return value.value
    return None
