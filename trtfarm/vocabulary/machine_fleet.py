"""The built-in fleet: what this machine can build, for a folder with no ``gpu_targets.yaml``.

Its GPUs come from NVML and its toolchains from what imports here. Each GPU gets a TensorRT-RTX target where
TensorRT-RTX runs on it, and a TensorRT target where TensorRT is installed (or the GPU is one TensorRT-RTX does not
serve). With no GPU, the fleet is the portable TensorRT-RTX targets (one ahead-of-time build serves every RTX GPU).
A toolchain that is not installed keeps the version trtfarm's extras pin, so ``trtfarm targets`` says how to get it.
"""

from __future__ import annotations

import re

from trtfarm.vocabulary.fleet import RTX_COMPUTE_CAPABILITIES, Flavour, Fleet, Gpu, Target, Toolchain

RTX_VERSION = "1.7.1.116"  # the [rtx] extra's tensorrt-rtx-cu13
TENSORRT_VERSION = "11.4.0.106"  # the [tensorrt] extra's
# With no GPU: one RTX GPU per architecture the portable plan serves (Ada, Blackwell), as NVML names them
PORTABLE_RTX = {
    "rtx-4090": Gpu(nvml_name="NVIDIA GeForce RTX 4090", compute_capability="8.9", memory_gib=24, pool="rtx-4090"),
    "rtx-5090": Gpu(nvml_name="NVIDIA GeForce RTX 5090", compute_capability="12.0", memory_gib=32, pool="rtx-5090"),
}


def gpu_key(nvml_name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``rtx-4090``; ``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``."""
    name = re.sub(r"^(nvidia\s+)?(geforce\s+)?", "", nvml_name.strip().lower())
    return re.sub(r"[^a-z0-9.]+", "-", name).strip("-.") or "gpu"


def _rtx_capable(cc: str) -> bool:
    return cc in RTX_COMPUTE_CAPABILITIES or cc.startswith("12.")


def machine_fleet(gpus: list[tuple[str, str, float]], versions: dict[str, str | None]) -> Fleet:
    """The fleet of a machine with these GPUs (NVML name, compute capability, GiB) and toolchain versions."""
    rtx = Toolchain(flavour=Flavour.tensorrt_rtx, version=versions.get("tensorrt_rtx") or RTX_VERSION)
    trt = Toolchain(flavour=Flavour.tensorrt, version=versions.get("tensorrt") or TENSORRT_VERSION)
    found: dict[str, Gpu] = {}
    for name, cc, gib in gpus:
        key = gpu_key(name)
        count = found[key].count + 1 if key in found else 1
        found[key] = Gpu(nvml_name=name, compute_capability=cc, memory_gib=round(gib, 1), pool=key, count=count)
    targets = []
    for key, gpu in (found or PORTABLE_RTX).items():
        if _rtx_capable(gpu.compute_capability):
            targets.append(Target(id=f"{key}-rtx{_short(rtx.version)}", gpu=key, toolchain="rtx", release_on="built"))
        if found and (versions.get("tensorrt") or not _rtx_capable(gpu.compute_capability)):
            targets.append(Target(id=f"{key}-trt{_short(trt.version)}", gpu=key, toolchain="trt"))
    used = {t.toolchain for t in targets}
    return Fleet(toolchains={k: v for k, v in (("rtx", rtx), ("trt", trt)) if k in used},
                 gpus=found or PORTABLE_RTX, targets=targets)


def _short(version: str) -> str:
    return ".".join(version.split(".")[:2])


def this_machine_fleet() -> Fleet:
    """The built-in fleet of this machine (NVML scan, toolchain imports)."""
    from trtfarm.machine.capabilities import local_capabilities

    caps = local_capabilities()
    return machine_fleet([(g.name, g.compute_capability, g.memory_gib) for g in caps.gpus.gpus], caps.versions)

