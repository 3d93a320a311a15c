"""A store of one model's exports for the ledger tests: ``N`` plans of enc on rtx-4090, published once, copied per test.

The plans are made-up bytes behind a TensorRT-RTX header and real manifests (tests/chain_farm.py's ``Farm.publish``),
published through the real publish protocol; export ``i`` is ``i`` days newer than export 0. ``Exports.fresh`` copies
the published store (no pointer, no receipt yet) to a new folder, so each example starts from the same store.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.layout import ReleaseName
from trtfarm.publishing.attest import read_stored
from trtfarm.store import open_store
from trtfarm.vocabulary.promotion import Promotion, ReceiptHost

from ..chain_farm import TC, Farm

NAME = ReleaseName("enc", "rtx-4090", TC)
STABLE, CANDIDATE = layout.channel_key(*NAME, "stable"), layout.channel_key(*NAME, "candidate")
KEYS = {"stable": STABLE, "candidate": CANDIDATE}
POLICY = Promotion(receipts=2, soak_s=0, on_failed_receipt="rollback")
RTX_4090 = dict(gpu_name="NVIDIA GeForce RTX 4090", compute_capability="8.9", pci_device_id="0x2684")
H100 = dict(gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", pci_device_id="0x2330")


def host(name: str) -> ReceiptHost:
    """A serving host: ``h100-*`` has an H100 (TensorRT-RTX plans do not run there), any other an RTX 4090."""
    return ReceiptHost(name=name, **(H100 if name.startswith("h100") else RTX_4090))


@dataclass
class Exports:
    """The published store's folder and each export's manifest key, oldest first."""

    root: Path
    keys: list[str]

    @classmethod
    def publish(cls, root: Path, n: int) -> Exports:
        farm = Farm.__new__(Farm)  # its publish step alone: no releases
        farm.root, farm.store = root, open_store((root / "store").as_uri())
        root.mkdir(parents=True, exist_ok=True)
        keys = [farm.publish("enc", "rtx-4090", f"2026-01-{i + 1:02d}T00:00:00+00:00", 10 + i, None)
                for i in range(n)]
        return cls(root / "store", keys)

    def fresh(self, to: Path) -> str:
        """A copy of the published store at ``to``; its URI."""
        shutil.copytree(self.root, to)
        return to.as_uri()

    def manifest(self, store, i: int):
        return read_stored(store, self.keys[i]).manifest

    def index(self, manifest_key: str | None) -> int | None:
        return None if manifest_key is None else self.keys.index(manifest_key)
