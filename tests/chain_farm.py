"""A farm of made-up plan bytes, really signed, in a file:// store: the fast chain tests' fixture.

The plans are not TensorRT plans: a TensorRT-RTX 1.7.1.116 header (what the loader reads without a GPU) and made-up
bytes (the chain never parses a plan: it hashes it; a runtime refuses it). The manifest is a real one
(tests/data/manifest_encoder_rtx4090.json) with model, GPU, export time and plan changed, published through the
real publish protocol with real signatures, released with real signed claims.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trtfarm import layout
from trtfarm.publishing.attest import Attestation, read_stored
from trtfarm.publishing.publish import publish_plan
from trtfarm.publishing.release import read_pointer
from trtfarm.releases.moves import move_release
from trtfarm.runtime.pull import pull_release
from trtfarm.signing.accepted import AcceptedReleases
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import manifest_from_json

TEMPLATE = Path(__file__).parent / "data" / "manifest_encoder_rtx4090.json"
TC = "tensorrt_rtx-1.7.1.116"
T0, T1 = "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"


def rtx_header(version: tuple[int, int, int, int] = (1, 7, 1, 116), magic: bytes = b"vtrt") -> bytes:
    """The 28 bytes a TensorRT-RTX plan starts with (trtfarm/machine/header.py): magic, then the version at 24."""
    return magic + bytes(20) + bytes(version)


def make_key(folder: Path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    (folder / f"{name}.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    (folder / f"{name}.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return PemKeySigner(folder / f"{name}.pem"), load_trusted_keys([folder / f"{name}.pub"], "TEST")


class Farm:
    """enc v1 (T0) and v2 (T1) on rtx-4090, enc v2 on rtx-3090, mlp on rtx-4090; all signed and released."""

    def __init__(self, root: Path, signed: bool = True) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.signer, self.trust = make_key(root, "worker")
        self.stranger, _ = make_key(root, "stranger")
        self.store = open_store((root / "store").as_uri())
        self.memory = AcceptedReleases(root / "accepted.json")
        signer = self.signer if signed else None
        self.keys = {}
        for name, gpu, exported, seed in (("enc", "rtx-4090", T0, 1), ("enc", "rtx-4090", T1, 2),
                                          ("enc", "rtx-3090", T1, 3), ("mlp", "rtx-4090", T1, 4)):
            self.keys[name, gpu, exported] = self.publish(name, gpu, exported, seed, signer)
            move_release(self.store, self.keys[name, gpu, exported], read_stored(
                self.store, self.keys[name, gpu, exported]).manifest, release_on="built", reason="built",
                signer=signer)

    def publish(self, name: str, gpu: str, exported: str, seed: int, signer, build: str = "") -> str:
        t = manifest_from_json(TEMPLATE.read_bytes())
        onnx = hashlib.sha256(f"{name}{exported}".encode()).hexdigest()
        digest = hashlib.sha256(f"{onnx}{gpu}{build}".encode()).hexdigest()
        m = t.model_copy(update={
            "model": t.model.model_copy(update={"name": name, "exported_at": exported, "onnx_digest": onnx}),
            "target": t.target.model_copy(update={"gpu": gpu}),
            "build": t.build.model_copy(update={"build_digest": digest})})
        prefix = layout.plan_prefix(name, onnx, gpu, TC, m.build.build_digest)
        plan = self.root / f"{name}-{seed}.plan"
        plan.write_bytes(rtx_header() + bytes([seed]) * (1000 + seed))
        prov = Attestation(lambda man, sha: json.dumps({"subject": man.plan.sha256}).encode(), signer)
        return publish_plan(self.store, prefix, plan, lambda info: m.model_copy(update={"plan": info}),
                            attest=prov).manifest_key

    def pointer(self, model: str = "enc", gpu: str = "rtx-4090"):
        return read_pointer(self.store, layout.release_key(model, gpu, TC))

    def put_pointer(self, pointer, model: str = "enc", gpu: str = "rtx-4090") -> None:
        key = layout.release_key(model, gpu, TC)
        data = pointer if isinstance(pointer, bytes) else pointer.model_dump_json().encode()
        self.store.compare_and_swap(key, data, self.store.get(key).etag)

    def pull(self, to: str = "host", trust=True, memory=True, max_age=None, model: str = "enc"):
        return pull_release(self.store, model, "rtx-4090", [TC], self.root / to / f"{model}.plan",
                            trust=self.trust if trust else None, accepted=self.memory if memory else None,
                            max_age=max_age)


def refused(why: str, match: str, call, /, *args, **kwargs) -> SignatureRefused:
    with pytest.raises(SignatureRefused, match=match) as err:
        call(*args, **kwargs)
    assert err.value.reason == why, str(err.value)
    return err.value
