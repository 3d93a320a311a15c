"""The store states of the one-story matrix: a signed, released farm and the ways one release's objects can be wrong.

The farm: two registered models, ``enc`` and ``mlp`` (the example encoder with two seeds), built for real
(TensorRT-RTX on this CPU) by ``run_local`` for two targets released on build, signed by the workers' key, with the
run's outcomes stored. It is built once; each state is a copy of its folder with one release's objects changed.

The release under test is ``enc`` on the RTX 4090. Its objects (``OBJECTS``) are each left as built, deleted,
damaged (truncated, garbage bytes, valid JSON of another shape) or swapped for the object of the same kind of
another model (``mlp`` on the RTX 4090) or of another target (``enc`` on the RTX 3090). Its attestations (the plan
folder's signature bundle and the pointer's signed release claim) are the workers' (``attested``), absent
(``unattested``) or re-signed by a key no reader trusts (``untrusted``). The views ran on the untouched copy on this
machine first (``warm``: their caches know the store as it was) or not (``cold``). The reader (a fleet file) trusts
the workers' key (``trusted``) or has no trusted keys (``plain``).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from trtfarm import layout
from trtfarm.publishing.attest import sha256_bytes, signed_names
from trtfarm.publishing.registry import register_export
from trtfarm.signing.bundle import sign_resources
from trtfarm.signing.keys import PemKeySigner
from trtfarm.signing.release_claim import sign_release, unverified_claim
from trtfarm.store import open_store
from trtfarm.vocabulary.promotion import Promotion

from ..fleet_store import build_all, encoder_export
from ..test_signing import key_pair

TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
TARGET, OTHER_TARGET = "rtx4090-rtx1.7", "rtx3090-rtx1.7-o5"
GPU, OTHER_GPU = "rtx-4090", "rtx-3090"
FLEET = f"""\
version: 1
toolchains:
  rtx-1.7: {{flavour: tensorrt_rtx, version: "1.7.1.116"}}
gpus:
  rtx-4090: {{nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}}
  rtx-3090: {{nvml_name: "NVIDIA GeForce RTX 3090", compute_capability: "8.6", memory_gib: 24, pool: rtx-3090}}
targets:
  - {{id: {TARGET}, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}}
  - {{id: {OTHER_TARGET}, gpu: rtx-3090, toolchain: rtx-1.7, settings: {{optimization_level: 5}}, release_on: built}}
"""
READERS = {"trusted": FLEET + "signing:\n  trusted_keys: [worker.pub]\n", "plain": FLEET}
OBJECTS = ("pointer", "manifest", "plan", "bundle", "provenance", "export", "outcomes")
DAMAGE = ("truncated", "garbage", "shape")
SWAPS = ("other-model", "other-target")
CHANNEL_SWAP = "other-channel"  # the pointer only: the candidate channel's signed pointer of the same release
PER_MODEL = ("export", "outcomes")  # one per model, not per target: no other target's to swap in
ATTESTATIONS = ("attested", "unattested", "untrusted")
CACHES = ("cold", "warm")  # warm: the views ran on this machine before the store changed
GARBAGE = b"\x00\xff\xfe not a store object \x80" * 8
SHAPE = json.dumps([{"model": "enc", "target": TARGET}]).encode()  # valid JSON, another shape


@dataclass(frozen=True)
class State:
    """One store state seen by one reader: ``obj`` changed by ``variant`` (``intact``: nothing)."""

    reader: str
    attest: str
    cache: str
    obj: str
    variant: str

    @property
    def id(self) -> str:
        what = "intact" if self.variant == "intact" else f"{self.obj}-{self.variant}"
        return f"{self.reader}-{self.attest}-{self.cache}-{what}"

    @property
    def damaged(self) -> bool:
        """The release's own object is unreadable, or a file its pointer names is gone."""
        return self.variant in DAMAGE or (self.variant == "missing" and self.obj in ("manifest", "plan"))


def object_states() -> list[tuple[str, str]]:
    """Every (object, variant) of the family, the untouched release first."""
    out = [("release", "intact")]
    for obj in OBJECTS:
        swaps = SWAPS[:1] if obj in PER_MODEL else (*SWAPS, CHANNEL_SWAP) if obj == "pointer" else SWAPS
        out += [(obj, v) for v in ("missing", *DAMAGE, *swaps)]
    return out


def all_states() -> list[State]:
    """The whole product: every reader x attestation x cache x object state."""
    return [State(r, a, c, o, v) for r in READERS for a in ATTESTATIONS for c in CACHES for o, v in object_states()
            if not (a == "unattested" and o == "bundle")]  # no bundle to change: unattested took it away


def sampled_states(size: int, seed: int = 46) -> list[State]:
    """Every object state under the trusting reader with the workers' signatures (cold and warm), and a fixed
    sample of the rest of the product: ``size`` states in all."""
    every = all_states()
    core = [s for s in every if s.reader == "trusted" and s.attest == "attested"]
    rest = [s for s in every if s not in core]
    return core + random.Random(seed).sample(rest, size - len(core))


def _release_keys(files: Path, model: str, gpu: str) -> dict[str, str]:
    """The store keys of one release's objects, by kind."""
    pointer_key = layout.release_key(model, gpu, TOOLCHAIN)
    pointer = json.loads((files / pointer_key).read_bytes())
    folder = layout.folder_of(pointer["manifest"])
    msha = sha256_bytes((files / pointer["manifest"]).read_bytes())
    export = next((files / "models" / model).glob("*/export.json")).relative_to(files).as_posix()
    outcomes = next((files / "reports" / model).glob("*/outcomes.json")).relative_to(files).as_posix()
    return {"pointer": pointer_key, "manifest": pointer["manifest"], "plan": pointer["plan_key"],
            "bundle": layout.signature_key(folder, msha), "provenance": layout.provenance_key(folder, msha),
            "export": export, "outcomes": outcomes}


def _candidate_pointer(store, manifest_key: str, key: Path) -> bytes:
    """The bytes of a candidate-channel pointer of the same release, signed by the worker (then taken away again)."""
    from trtfarm.publishing.attest import read_stored
    from trtfarm.releases.moves import move_release

    m = read_stored(store, manifest_key).manifest
    pointer = move_release(store, manifest_key, m, release_on="built", reason="a canary", channel="candidate",
                           promotion=Promotion(), signer=PemKeySigner(key))
    candidate = layout.channel_key(m.model.name, m.target.gpu, pointer.toolchain, "candidate")
    data = store.get(candidate).data
    store.delete(candidate)
    return data


class StoryFarm:
    """The built farm (under ``root``), the keys of the release under test and the objects to swap in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for name in ("worker", "stranger"):
            key_pair(root, name)
        (root / "build.yaml").write_text(FLEET + "signing:\n  key: worker.pem\n  trusted_keys: [worker.pub]\n")
        for reader, text in READERS.items():
            (root / f"{reader}.yaml").write_text(text)
        store = open_store((root / "store").as_uri())
        for seed, model in enumerate(("enc", "mlp")):
            register_export(store, encoder_export(root / model, seed, model))
        rows = build_all(store.uri, root / "build.yaml")
        assert sorted(r.outcome.status for r in rows) == ["built"] * 4, rows
        files = root / "store"
        self.keys = _release_keys(files, "enc", GPU)
        sources = {"other-model": _release_keys(files, "mlp", GPU), "other-target": _release_keys(files, "enc",
                                                                                                 OTHER_GPU)}
        self.swaps = {v: {o: (files / k).read_bytes() for o, k in keys.items()} for v, keys in sources.items()}
        self.swaps[CHANNEL_SWAP] = {"pointer": _candidate_pointer(store, self.keys["manifest"], root / "worker.pem")}
        self.stranger = PemKeySigner(root / "stranger.pem")

    def copy(self, state: State, to: Path) -> tuple[str, Path]:
        """An untouched copy of the farm in ``to``: (its store URI, ``state``'s reader's fleet file)."""
        shutil.copytree(self.root, to, ignore=lambda d, names: [n for n in names if Path(d) == self.root and (
            n in ("enc", "mlp") or n.endswith(".pem"))])  # the exports' sources and the private keys
        return (to / "store").as_uri(), to / f"{state.reader}.yaml"

    def change(self, state: State, to: Path) -> None:
        """Put the copy in ``to`` in ``state``."""
        files = to / "store"
        if state.attest != "attested":
            self._attestations(files, state.attest)
        if state.variant != "intact":
            self._change(files / self.keys[state.obj], state.obj, state.variant)

    def _change(self, path: Path, obj: str, variant: str) -> None:
        if variant == "missing":
            path.unlink(missing_ok=True)
        elif variant == "truncated":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif variant == "garbage":
            path.write_bytes(GARBAGE)
        elif variant == "shape":
            path.write_bytes(SHAPE)
        else:
            path.write_bytes(self.swaps[variant][obj])

    def _attestations(self, files: Path, attest: str) -> None:
        """Take the release's signatures away, or sign the same release again with the stranger's key."""
        pointer_path, bundle_path = files / self.keys["pointer"], files / self.keys["bundle"]
        pointer = json.loads(pointer_path.read_bytes())
        if attest == "unattested":
            bundle_path.unlink()
            pointer["claim"] = None
        else:
            msha = sha256_bytes((files / self.keys["manifest"]).read_bytes())
            plan, man, prov = signed_names(msha)
            resources = {plan: sha256_bytes((files / self.keys["plan"]).read_bytes()), man: msha,
                         prov: sha256_bytes((files / self.keys["provenance"]).read_bytes())}
            folder = layout.folder_of(self.keys["manifest"])
            bundle_path.write_bytes(sign_resources(self.stranger, layout.leaf_of(folder), resources,
                                                   ignore_paths=[layout.signature_name(msha)]))
            pointer["claim"] = sign_release(self.stranger, unverified_claim(pointer["claim"]))
        pointer_path.write_text(json.dumps(pointer, indent=2))
