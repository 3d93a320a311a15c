"""A stand-in for nvidia-ml-py's ``pynvml`` (the calls trtfarm/machine/gpu.py makes), for GPU hosts in tests.

Put this folder first on ``PYTHONPATH`` and list the GPUs in ``FAKE_NVML_GPUS`` as ``NAME:CC:GIB`` joined by ``;``
(``NVIDIA H200:9.0:140.4``). The values are what NVML reported on an H200 host (driver 580.159.04: name
"NVIDIA H200" as a str, compute capability (9, 0), 140.4 GiB), so the built-in fleet sees what it would there.
"""

import os


class NVMLError(Exception):
    pass


def _gpus():
    return [g.split(":") for g in os.environ.get("FAKE_NVML_GPUS", "").split(";") if g]


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
    major, minor = h[1].split(".")
    return int(major), int(minor)


class _Memory:
    def __init__(self, total):
        self.total = total


def nvmlDeviceGetMemoryInfo(h):
    return _Memory(int(float(h[2]) * 2**30))


def nvmlDeviceGetName(h):
    return h[0]
