"""A store of one model's exports for the ledger tests: ``N`` plans of enc on rtx-4090, published once, copied per test.

The plans are made-up bytes behind a TensorRT-RTX header and real manifests (tests/chain_farm.py's ``Farm.publish``),
published through the real publish protocol; export ``i`` is ``i`` days newer than export 0, an fp32 plan unless
``gates`` gives it an fp16 precision gate's verdict (its manifest's accuracy record, as a build writes it).
``Exports.fresh`` copies the published store (no pointer, no receipt yet) to a new folder, so each example starts
from the same store.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.layout import ReleaseName
from trtfarm.publishing.attest import Attestation, read_stored
from trtfarm.publishing.publish import publish_plan
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import Manifest, manifest_from_json
from trtfarm.vocabulary.promotion import Promotion, ReceiptHost

from ..chain_farm import TC, TEMPLATE, rtx_header

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
    def publish(cls, root: Path, n: int, gates: dict[int, str] | None = None) -> Exports:
        root.mkdir(parents=True, exist_ok=True)
        store = open_store((root / "store").as_uri())
        keys = [_publish(store, root, i, (gates or {}).get(i)) for i in range(n)]
        return cls(root / "store", keys)

    def fresh(self, to: Path) -> str:
        """A copy of the published store at ``to``; its URI."""
        shutil.copytree(self.root, to)
        return to.as_uri()

    def manifest(self, store, i: int):
        return read_stored(store, self.keys[i]).manifest

    def index(self, manifest_key: str | None) -> int | None:
        return None if manifest_key is None else self.keys.index(manifest_key)


def _publish(store, root: Path, i: int, verdict: str | None) -> str:
    """Export ``i`` of enc on rtx-4090, published unsigned (as ``chain_farm.Farm.publish``); its manifest key."""
    t = manifest_from_json(TEMPLATE.read_bytes())
    exported = f"2026-01-{i + 1:02d}T00:00:00+00:00"
    onnx = hashlib.sha256(f"enc{exported}".encode()).hexdigest()
    digest = hashlib.sha256(f"{onnx}rtx-4090".encode()).hexdigest()
    m = t.model_copy(update={
        "model": t.model.model_copy(update={"name": "enc", "exported_at": exported, "onnx_digest": onnx}),
        "target": t.target.model_copy(update={"gpu": "rtx-4090"}),
        "build": t.build.model_copy(update={"build_digest": digest})})
    m = gated(m, verdict) if verdict else m
    plan = root / f"enc-{i}.plan"
    plan.write_bytes(rtx_header() + bytes([10 + i]) * (1010 + i))
    prov = Attestation(lambda man, sha: json.dumps({"subject": man.plan.sha256}).encode(), None)
    return publish_plan(store, layout.plan_prefix("enc", onnx, "rtx-4090", TC, digest), plan,
                        lambda info: m.model_copy(update={"plan": info}), attest=prov).manifest_key


def gated(m: Manifest, verdict: str) -> Manifest:
    """``m`` as an fp16 build whose precision gate gave ``verdict`` records it (``precision.accuracy``)."""
    figures = [{"output": "y", "cosine_mean": 1.0, "cosine_min": 1.0, "max_abs": 0.0, "max_rel": 0.0,
                "signal_rows": 0 if verdict == "not judged" else 8, "same_for_every_sample": verdict == "not judged"}]
    accuracy = {"mode": "fp16", "passed": {"passed": True, "failed": False}.get(verdict), "verdict": verdict,
                "figures": figures, "failures": ["y: max error 0.5 is above 0.01"] if verdict == "failed" else []}
    return m.model_copy(update={"precision": m.precision.model_copy(update={"recipe": "fp16", "accuracy": accuracy})})
