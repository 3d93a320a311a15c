"""How the fleet names a GPU model exactly: its PCI device ids, and the MIG profiles a model can be sliced into.

A GPU model is its PCI device id (vendor 0x10de), as NVIDIA NIM matches engine profiles on ``pciDeviceId:vendorId``;
the NVML name and compute capability do not tell siblings apart (H100 SXM / PCIe / NVL share 9.0). NVML reports the
id in ``nvmlDeviceGetPciInfo(h).pciDeviceId`` as ``0xDDDDVVVV`` (device, then vendor): ``0x233510DE`` is device
0x2335 of vendor 0x10DE. ``nvidia-smi --query-gpu=pci.device_id`` prints the same number; ``lspci -nn`` prints
``[10de:2335]``.

Where each id below comes from (``KNOWN_PCI_IDS``'s third column):

- ``pci.ids``: the PCI ID database (https://pci-ids.ucw.cz, vendor 10de), version 2023.04.10 as Debian's
  ``pci.ids`` package carries it; the name there is quoted beside each id.
- ``driver-readme``: NVIDIA's Linux driver README, "Appendix A. Supported NVIDIA GPU Products" (the device id
  column); for models newer than that pci.ids version. Transcribed, not re-read here: confirm one with
  ``nvidia-smi --query-gpu=name,pci.device_id --format=csv`` on such a machine before relying on it.
- ``nvml-h200``: read through NVML on the lent H200 (docs/h200-identity.json).

MIG profiles (``MIG_PROFILES``) are NVIDIA's MIG User Guide's "Supported MIG Profiles" tables, by GPU model.
"""

from __future__ import annotations

import re

RTX_COMPUTE_CAPABILITIES = ("8.0", "8.6", "8.9", "12.0", "12.1")  # where TensorRT-RTX plans run (and 12.x)

NVIDIA_VENDOR = "0x10de"
PCI_ID = re.compile(r"^0x[0-9a-f]{4}$")

# NVML name -> (PCI device ids, what the source calls it, source)
KNOWN_PCI_IDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "NVIDIA H100 80GB HBM3": (("0x2330",), "GH100 [H100 SXM5 80GB]", "pci.ids"),
    "NVIDIA H100 PCIe": (("0x2331",), "GH100 [H100 PCIe]", "pci.ids"),
    "NVIDIA H100 NVL": (("0x2321",), "H100 NVL (pci.ids 2023.04 lists 2321 as 'GH100' without a name)",
                        "driver-readme"),
    "NVIDIA H200": (("0x2335",), "pciDeviceId 0x233510DE", "nvml-h200"),
    "NVIDIA A100-SXM4-80GB": (("0x20b2",), "GA100 [A100 SXM4 80GB]", "pci.ids"),
    "NVIDIA A100-SXM4-40GB": (("0x20b0",), "GA100 [A100 SXM4 40GB]", "pci.ids"),
    "NVIDIA A100 80GB PCIe": (("0x20b5",), "GA100 [A100 PCIe 80GB]", "pci.ids"),
    "NVIDIA A100-PCIE-40GB": (("0x20b1", "0x20f1"), "GA100 [A100 PCIe 40GB]", "pci.ids"),
    "NVIDIA A30": (("0x20b7",), "GA100GL [A30 PCIe]", "pci.ids"),
    "NVIDIA A10": (("0x2236",), "GA102GL [A10]", "pci.ids"),
    "NVIDIA A10G": (("0x2237",), "GA102GL [A10G]", "pci.ids"),
    "NVIDIA A40": (("0x2235",), "GA102GL [A40]", "pci.ids"),
    "NVIDIA L4": (("0x27b8",), "AD104GL [L4]", "pci.ids"),
    "NVIDIA L40": (("0x26b5",), "AD102GL [L40]", "pci.ids"),
    "NVIDIA L40S": (("0x26b9",), "L40S (not in pci.ids 2023.04)", "driver-readme"),
    "Tesla T4": (("0x1eb8",), "TU104GL [Tesla T4]", "pci.ids"),
    "NVIDIA GeForce RTX 4090": (("0x2684",), "AD102 [GeForce RTX 4090]", "pci.ids"),
    "NVIDIA GeForce RTX 5090": (("0x2b85",), "GB202 GeForce RTX 5090 (not in pci.ids 2023.04)", "driver-readme"),
}

_H100_80 = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_A100_80 = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_A100_40 = ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
MIG_PROFILES: dict[str, tuple[str, ...]] = {
    "NVIDIA H100 80GB HBM3": _H100_80,
    "NVIDIA H100 PCIe": _H100_80,
    "NVIDIA H100 NVL": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "NVIDIA H200": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "NVIDIA A100-SXM4-80GB": _A100_80,
    "NVIDIA A100 80GB PCIe": _A100_80,
    "NVIDIA A100-SXM4-40GB": _A100_40,
    "NVIDIA A100-PCIE-40GB": _A100_40,
    "NVIDIA A30": ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
}
NO_MIG = {"NVIDIA A10", "NVIDIA A10G", "NVIDIA A40", "NVIDIA L4", "NVIDIA L40", "NVIDIA L40S", "Tesla T4",
          "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090"}
ALL_MIG_PROFILES = sorted({p for profiles in MIG_PROFILES.values() for p in profiles})


def pci_id(value: object) -> str:
    """A declared PCI device id, lowercase ``0x2330``; ``ValueError`` naming the fix for anything else."""
    if not isinstance(value, str):
        raise ValueError(f"PCI device id {value!r} is a number: quote it, \"0x2330\" (YAML reads an unquoted "
                         "0x2330 or 2330 as a number, and the two are different ids)")
    text = value.strip().lower()
    if not PCI_ID.fullmatch(text):
        raise ValueError(f"PCI device id {value!r} is not 4 hex digits: write it as \"0x2330\" (the device part of "
                         "nvidia-smi --query-gpu=pci.device_id, 0x233010DE; vendor 10de is implied)")
    return text


def device_id_of(pci_device_id: int) -> str:
    """NVML's ``pciDeviceId`` (``0x233510DE``: device, then vendor) -> the device id ``0x2335``."""
    return f"0x{(int(pci_device_id) >> 16) & 0xFFFF:04x}"


def vendor_id_of(pci_device_id: int) -> str:
    """NVML's ``pciDeviceId`` -> the vendor id (``0x10de`` for NVIDIA)."""
    return f"0x{int(pci_device_id) & 0xFFFF:04x}"


def mig_problem(nvml_name: str, profile: str) -> str | None:
    """Why ``profile`` is no MIG profile of ``nvml_name``; None when it is one (of some model, for an unknown one)."""
    if nvml_name in NO_MIG:
        return f"{nvml_name} has no MIG mode, so no MIG profile {profile!r}; remove mig:"
    known = MIG_PROFILES.get(nvml_name)
    if known is not None and profile not in known:
        return f"MIG profile {profile!r} does not exist on {nvml_name}; its profiles: {', '.join(known)}"
    if known is None and profile not in ALL_MIG_PROFILES:
        return (f"MIG profile {profile!r} does not exist on any GPU trtfarm knows; profiles look like 1g.10gb "
                "(`nvidia-smi mig -lgip` lists a GPU's)")
    return None
