"""A stand-in for nvidia-ml-py's ``pynvml`` (the calls trtfarm/machine/gpu.py makes), for GPU hosts in tests.

Put this folder first on ``PYTHONPATH`` and list the GPUs in ``FAKE_NVML_GPUS`` as ``NAME:CC:GIB`` joined by ``;``
(``NVIDIA H200:9.0:140.4``), each optionally followed by ``:key=value`` fields: ``pci=0x2331`` (the PCI device id;
default: ``PCI_IDS`` by name), ``sub=0x...`` (pciSubSystemId), ``ecc=0|1|none``, ``mig=1g.10gb`` (MIG mode on, one
instance of that profile) or ``mig=off`` / ``mig=none`` (a GPU without MIG mode).

Each call returns what pynvml documents, in its shapes: ``nvmlDeviceGetPciInfo`` a structure whose ``pciDeviceId``
is ``0xDDDDVVVV`` (device, then vendor 10DE: ``0x233510DE``) and ``busId`` bytes; ``nvmlDeviceGetEccMode`` and
``nvmlDeviceGetMigMode`` ``[current, pending]`` or ``NVMLError_NotSupported``; ``nvmlDeviceGetAttributes`` (MIG
device handles only, as NVML documents) ``multiprocessorCount`` and ``memorySizeMB``; the GPU instance profile's
``name`` is ``b"MIG 1g.10gb"``. The H200 defaults are what NVML reported on the lent H200 (driver 580.159.04: name
"NVIDIA H200" as a str, compute capability (9, 0), 140.4 GiB, pciDeviceId 0x233510DE, pciSubSystemId 0x18BF10DE, ECC
on, MIG off). MIG profiles are the H100 80GB's from NVIDIA's MIG User Guide (profile id, SMs, memory in MiB).
"""

import os

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
# PCI device ids by NVML name (pci.ids, vendor 10de; H200: read on the lent machine)
PCI_IDS = {"NVIDIA H200": 0x2335, "NVIDIA H100 80GB HBM3": 0x2330, "NVIDIA H100 PCIe": 0x2331,
           "NVIDIA H100 NVL": 0x2321, "NVIDIA A10": 0x2236, "NVIDIA A10G": 0x2237, "NVIDIA L40": 0x26B5,
           "NVIDIA L40S": 0x26B9, "NVIDIA L4": 0x27B8, "NVIDIA GeForce RTX 4090": 0x2684,
           "NVIDIA GeForce RTX 5090": 0x2B85, "NVIDIA GeForce RTX 3090": 0x2204}
MIG_CAPABLE = ("NVIDIA H", "NVIDIA A100", "NVIDIA A30")
MIG_PROFILES = {"1g.10gb": (19, 16, 9856), "2g.20gb": (14, 32, 19968), "3g.40gb": (9, 60, 40192),
                "7g.80gb": (0, 132, 80896)}


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's name
    pass


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def _gpus():
    found = []
    for i, entry in enumerate(g for g in os.environ.get("FAKE_NVML_GPUS", "").split(";") if g):
        name, cc, gib, *extra = entry.split(":")
        fields = dict(f.split("=", 1) for f in extra)
        mig_capable = name.startswith(MIG_CAPABLE)
        mig = fields.get("mig", "off" if mig_capable else "none")
        found.append({"index": i, "name": name, "cc": cc, "gib": float(gib),
                      "pci": int(fields.get("pci", hex(PCI_IDS.get(name, 0))), 16),
                      "sub": int(fields.get("sub", "0x18BF10DE" if name == "NVIDIA H200" else "0x0"), 16),
                      "ecc": fields.get("ecc", "1" if mig_capable or "L4" in name or "A10" in name else "none"),
                      "mig": mig})
    return found


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.159.04"


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(i):
    return _gpus()[i]


def nvmlDeviceGetCudaComputeCapability(h):
    major, minor = h["cc"].split(".")
    return int(major), int(minor)


def nvmlDeviceGetMemoryInfo(h):
    return _Struct(total=int(h["gib"] * 2**30), free=int(h["gib"] * 2**30), used=0)


def nvmlDeviceGetName(h):
    return h["name"]


def nvmlDeviceGetPciInfo(h):
    return _Struct(pciDeviceId=(h["pci"] << 16) | 0x10DE, pciSubSystemId=h["sub"], domain=0, bus=0x19 + h["index"],
                   device=0, busId=f"00000000:{0x19 + h['index']:02X}:00.0".encode(),
                   busIdLegacy=f"0000:{0x19 + h['index']:02X}:00.0".encode())


def nvmlDeviceGetEccMode(h):
    if h["ecc"] == "none":
        raise NVMLError_NotSupported("Not Supported")
    return [int(h["ecc"]), int(h["ecc"])]


def nvmlDeviceGetMigMode(h):
    if h.get("parent") is not None or h["mig"] == "none":
        raise NVMLError_NotSupported("Not Supported")
    on = NVML_DEVICE_MIG_DISABLE if h["mig"] == "off" else NVML_DEVICE_MIG_ENABLE
    return [on, on]


def nvmlDeviceGetAttributes(h):
    if h.get("parent") is None:  # NVML: "This API currently only supports MIG device handles"
        raise NVMLError_NotSupported("Not Supported")
    _, sms, mib = MIG_PROFILES[h["mig"]]
    return _Struct(multiprocessorCount=sms, memorySizeMB=mib, gpuInstanceSliceCount=int(h["mig"][0]))


def nvmlDeviceGetMaxMigDeviceCount(h):
    return 7 if h["mig"] not in ("none", "off") else 0


def nvmlDeviceGetMigDeviceHandleByIndex(h, j):
    if j != 0 or h["mig"] in ("none", "off"):
        raise NVMLError_NotFound("Not Found")
    return {**h, "parent": h["index"], "gi": 1}


def nvmlDeviceGetGpuInstanceId(h):
    return h["gi"]


def nvmlDeviceGetGpuInstanceById(h, gi):
    return {"gpu": h, "gi": gi}


def nvmlGpuInstanceGetInfo(gi):
    return _Struct(id=gi["gi"], profileId=MIG_PROFILES[gi["gpu"]["mig"]][0])


def nvmlDeviceGetGpuInstanceProfileInfoById(h, profile_id):
    name = next(n for n, p in MIG_PROFILES.items() if p[0] == profile_id)
    _, sms, mib = MIG_PROFILES[name]
    return _Struct(id=profile_id, multiprocessorCount=sms, memorySizeMB=mib, name=f"MIG {name}".encode())
