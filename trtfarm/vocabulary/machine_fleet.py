"""The built-in fleet, named: what a machine with these GPUs and toolchains can build (no gpu_targets.yaml).

Pure naming: the GPUs (as NVML reported them) and the toolchain versions come in as values (the scan is
``machine/capabilities.py``'s ``fleet_scan``; ``project/builtin_fleet.py`` joins the two), and so does the fleet
template. Each GPU gets a TensorRT-RTX target where TensorRT-RTX runs on it, and a TensorRT target where
TensorRT is installed (or the GPU is one TensorRT-RTX does not serve). With no GPU, the fleet is the portable
TensorRT-RTX targets (one ahead-of-time build serves every RTX GPU).
A toolchain that is not installed keeps the version trtfarm's extras pin, so ``trtfarm targets`` says how to get it.

One naming: a GPU that the fleet template (``trtfarm init``'s gpu_targets.yaml) declares keeps the template's key
and pool, toolchains are keyed ``rtx-1.7`` / ``trt-11.4`` as there, and every target id is ``target_id(gpu,
toolchain)``, the rule the template's ids follow. So a plan built before ``trtfarm init`` has the same store keys,
target id and ``reproduce`` command after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trtfarm.machine.gpu_ids import KNOWN_PCI_IDS
from trtfarm.vocabulary.fleet import RTX_COMPUTE_CAPABILITIES, Flavour, Fleet, Gpu, Target, Toolchain

RTX_VERSION = "1.7.1.116"  # the [rtx] extra's tensorrt-rtx-cu13
TENSORRT_VERSION = "11.4.0.106"  # the [tensorrt] extra's
PORTABLE_RTX_NAMES = ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090")  # with no GPU: Ada and Blackwell
SHORT_FLAVOUR = {Flavour.tensorrt: "trt", Flavour.tensorrt_rtx: "rtx"}


def gpu_key(nvml_name: str, template: Fleet) -> str:
    """The fleet template's key for a GPU it declares (``NVIDIA H100 80GB HBM3`` -> ``h100``), else one from its name.

    ``NVIDIA GeForce RTX 4090`` -> ``rtx-4090``; ``NVIDIA H200`` -> ``h200``; ``NVIDIA A100-SXM4-80GB`` ->
    ``a100-sxm4-80gb``.
    """
    known = {g.nvml_name: key for key, g in template.gpus.items()}
    if nvml_name in known:
        return known[nvml_name]
    name = re.sub(r"^(nvidia\s+)?(geforce\s+)?", "", nvml_name.strip().lower())
    return re.sub(r"[^a-z0-9.]+", "-", name).strip("-.") or "gpu"


def toolchain_key(flavour: Flavour, version: str) -> str:
    """``rtx-1.7`` / ``trt-11.4``: the short flavour and the major.minor version, as the template keys them."""
    return f"{SHORT_FLAVOUR[flavour]}-{'.'.join(version.split('.')[:2])}"


def target_id(gpu: str, toolchain: str) -> str:
    """``rtx-4090`` x ``rtx-1.7`` -> ``rtx-4090-rtx1.7``: the GPU key, then the toolchain key without its dash."""
    return f"{gpu}-{toolchain.replace('-', '', 1)}"


def _rtx_capable(cc: str) -> bool:
    return cc in RTX_COMPUTE_CAPABILITIES or cc.startswith("12.")


def _machine_gpus(gpus: list[tuple], template: Fleet) -> dict[str, Gpu]:
    """This machine's GPUs by key, counted; a GPU the template declares keeps its pool there.

    A GPU's PCI id is the one NVML read (else the one ``gpu_ids.KNOWN_PCI_IDS`` lists for its name); a MIG instance
    is a GPU of its own, keyed ``<gpu>-<profile>`` (``h100-1g.10gb``), with its profile.
    """
    pools = {g.nvml_name: g.pool for g in template.gpus.values()}
    found: dict[str, Gpu] = {}
    for name, cc, gib, *rest in gpus:
        pci, mig = (list(rest) + [None, None])[:2]
        ids = [pci] if pci else list(KNOWN_PCI_IDS.get(name, ((),))[0])
        key = gpu_key(name, template) + (f"-{mig}" if mig else "")
        pool = pools.get(name, gpu_key(name, template)) + (f"-{mig}" if mig else "")
        count = found[key].count + 1 if key in found else 1
        found[key] = Gpu(nvml_name=name, pci_ids=ids, compute_capability=cc, memory_gib=round(gib, 1), pool=pool,
                         count=count, mig=mig)
    return found


def machine_fleet(gpus: list[tuple], versions: Mapping[str, str | None], template: Fleet) -> Fleet:
    """The fleet of a machine with these GPUs and toolchain versions, named as ``template`` names its own.

    Each GPU is (NVML name, compute capability, GiB[, PCI id[, MIG profile]]).
    """
    rtx = Toolchain(flavour=Flavour.tensorrt_rtx, version=versions.get("tensorrt_rtx") or RTX_VERSION)
    trt = Toolchain(flavour=Flavour.tensorrt, version=versions.get("tensorrt") or TENSORRT_VERSION)
    rtx_key, trt_key = toolchain_key(rtx.flavour, rtx.version), toolchain_key(trt.flavour, trt.version)
    found = _machine_gpus(gpus, template)
    portable = {key: g for key, g in template.gpus.items() if g.nvml_name in PORTABLE_RTX_NAMES}
    targets = []
    for key, gpu in (found or portable).items():
        if _rtx_capable(gpu.compute_capability):
            targets.append(Target(id=target_id(key, rtx_key), gpu=key, toolchain=rtx_key, release_on="built"))
        if found and (versions.get("tensorrt") or not _rtx_capable(gpu.compute_capability)):
            targets.append(Target(id=target_id(key, trt_key), gpu=key, toolchain=trt_key))
    used = {t.toolchain for t in targets}
    return Fleet(toolchains={k: v for k, v in ((rtx_key, rtx), (trt_key, trt)) if k in used},
                 gpus=found or portable, targets=targets)
