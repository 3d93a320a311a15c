"""The attack matrix, generated: every tampering of the release chain a bucket writer can make, against every consumer.

Objects: the plan, its manifest, its provenance, its signature bundle and the release pointer (on a serving host:
the files ``pull`` wrote beside the plan, the pointer being the signed release). Variants: the object taken from
another model, from another target, from an older release, altered and re-signed by an untrusted key, truncated,
and with fields of the wrong type. Cells: each (object, variant), and every pair of them on two different objects,
against ``pull``, ``triton`` and ``release`` (the store tampered) and ``verify`` and ``load_plan`` (the host's files
tampered). The referee is the untampered farm: every consumer accepts it (load_plan up to the runtime, which needs
a GPU), and must refuse every cell in one line with exit 1 (load_plan: a ``PlanMismatch``), write nothing to the
serving path, and never end in a traceback. docs/signing.md gives the totals.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtfarm import layout
from trtfarm.cli.main import app
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import read_pointer
from trtfarm.runtime.loader import PlanMismatch, load_plan
from trtfarm.signing.bundle import sign_resources
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.signing.release_claim import sign_release, unverified_claim
from trtfarm.vocabulary.manifest import ManifestInvalid

from .signed_farm import GPU, OTHER_GPU, build_farm
from .test_signing import RTX, RTX4090, TOOLCHAIN

OBJECTS = ("plan", "manifest", "provenance", "bundle", "pointer")
VARIANTS = ("other model", "other target", "older release", "untrusted key", "truncated", "wrong type")
CELLS = [((o, v),) for o in OBJECTS for v in VARIANTS] + [
    (a, b) for a, b in itertools.combinations([(o, v) for o in OBJECTS for v in VARIANTS], 2) if a[0] != b[0]]
STORE_CONSUMERS, HOST_CONSUMERS = ("pull", "triton", "release"), ("verify", "load_plan")


def _chain(store, model: str, gpu: str, pointer_bytes: bytes | None = None) -> dict[str, bytes]:
    """The five objects of one release, by name: their bytes as stored."""
    key = layout.release_key(model, gpu, TOOLCHAIN)
    data = pointer_bytes or store.get(key).data
    pointer, _ = read_pointer(store, key) if pointer_bytes is None else (None, None)
    if pointer is None:
        from trtfarm.vocabulary.pointer import ReleasePointer

        pointer = ReleasePointer.model_validate_json(data)
    stored = read_stored(store, pointer.manifest)
    return {"plan": store.get(pointer.plan_key).data, "manifest": stored.manifest_bytes,
            "provenance": stored.provenance, "bundle": stored.signature, "pointer": data}


class Farm:
    """The referee farm, its sources of foreign objects, and the tamperings."""

    def __init__(self, root: Path) -> None:
        parts = build_farm(root)
        self.root, self.fleet, self.keys, self.store = root, parts["fleet"], parts["keys"], parts["store"]
        self.files = Path(self.store.uri.removeprefix("file://"))
        self.pointer_key = layout.release_key("enc", GPU, TOOLCHAIN)
        self.pointer, _ = read_pointer(self.store, self.pointer_key)
        folder = layout.folder_of(self.pointer.manifest)
        msha = read_stored(self.store, self.pointer.manifest).manifest_sha256
        self.keys_of = {"plan": self.pointer.plan_key, "manifest": self.pointer.manifest,
                        "provenance": layout.provenance_key(folder, msha),
                        "bundle": layout.signature_key(folder, msha), "pointer": self.pointer_key}
        self.mine = _chain(self.store, "enc", GPU)
        self.sources = {"other model": _chain(self.store, "mlp", GPU),
                        "other target": _chain(self.store, "enc", OTHER_GPU),
                        "older release": _chain(self.store, "enc", GPU, parts["v1"])}
        self.stranger = PemKeySigner(self.keys["stranger"][0])
        self.trust_env = {"TRTFARM_TRUSTED_KEYS": str(self.keys["worker"][1]),
                          "TRTFARM_SIGNING_KEY": str(self.keys["worker"][0])}
        self.listing = set(self.store.list(""))
        self.host = root / "host"  # a serving host that pulled v2 (and remembers it)
        self.state = root / "accepted.json"

    def variant(self, obj: str, variant: str, current: dict[str, bytes]) -> dict[str, bytes]:
        """The objects after one tampering (``current``: the objects so far)."""
        out = dict(current)
        if variant in self.sources:
            out[obj] = self.sources[variant][obj]
        elif variant == "truncated":
            out[obj] = current[obj][: len(current[obj]) // 2]
        elif variant == "wrong type":
            out[obj] = _wrong_type(obj, current[obj])
        else:
            out = self._resigned(obj, out)
        return out

    def _resigned(self, obj: str, out: dict[str, bytes]) -> dict[str, bytes]:
        """``obj`` altered and the chain re-signed by a key the host does not trust."""
        if obj == "pointer":
            doc = json.loads(out["pointer"])
            claim = unverified_claim(doc.get("claim")) if isinstance(doc, dict) else None
            if claim is None:
                return {**out, "pointer": out["pointer"] + b" "}
            doc["claim"] = sign_release(self.stranger, claim.model_copy(update={"version": claim.version + 10}))
            doc["version"] = claim.version + 10
            return {**out, "pointer": json.dumps(doc).encode()}
        if obj == "plan":
            out["plan"] = out["plan"][:-1] + bytes([out["plan"][-1] ^ 1])
        elif obj in ("manifest", "provenance") and _is_json_object(out[obj]):
            doc = json.loads(out[obj])
            if obj == "manifest" and isinstance(doc.get("build"), dict):
                doc["build"]["worker_host"] = "attacker"
            else:
                doc["attacker"] = True
            out[obj] = (json.dumps(doc, indent=2) + "\n").encode()
        else:
            out[obj] = out[obj] + b" "
        msha = hashlib.sha256(out["manifest"]).hexdigest()
        resources = {layout.PLAN_NAME: hashlib.sha256(out["plan"]).hexdigest(), layout.MANIFEST_NAME: msha,
                     layout.provenance_name(msha): hashlib.sha256(out["provenance"]).hexdigest()}
        out["bundle"] = sign_resources(self.stranger, "x", resources)
        return out

    def apply(self, cell) -> dict[str, bytes]:
        objs = dict(self.mine)
        for obj, variant in cell:
            objs = self.variant(obj, variant, objs)
        return objs

    def write_store(self, objs: dict[str, bytes]) -> None:
        for name, key in self.keys_of.items():
            (self.files / key).write_bytes(objs[name])

    def restore(self) -> None:
        for key in set(self.store.list("")) - self.listing:
            self.store.delete(key)
        self.write_store(self.mine)

    def host_files(self, objs: dict[str, bytes], folder: Path) -> Path:
        """The host's pulled files, tampered: ``folder/enc.plan`` and what ``pull`` writes beside it."""
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        plan = folder / "enc.plan"
        claim = json.loads(objs["pointer"]).get("claim") if _is_json_object(objs["pointer"]) else None
        pairs = {"": objs["plan"], ".manifest.json": objs["manifest"], ".provenance.json": objs["provenance"],
                 ".sigstore.json": objs["bundle"],
                 ".release.json": json.dumps(claim).encode() if claim is not None else objs["pointer"]}
        for suffix, data in pairs.items():
            (folder / f"enc.plan{suffix}").write_bytes(data)
        return plan


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _wrong_type(obj: str, data: bytes) -> bytes:
    if obj == "plan":
        return b'{"plan": 5}'
    try:
        doc = json.loads(data)
    except ValueError:
        return b"[5]"
    if not isinstance(doc, dict):
        return b"[5]"
    field = {"manifest": "plan", "provenance": "subject", "bundle": "verificationMaterial", "pointer": "claim"}[obj]
    doc[field] = 5
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    return Farm(tmp_path_factory.mktemp("matrix"))


def _invoke(args: list[str], env: dict[str, str]):
    return CliRunner().invoke(app, args, env={"COLUMNS": "200", **env}, catch_exceptions=True)


def _cli(farm: Farm, consumer: str, work: Path, state: Path):
    env = {**farm.trust_env, "TRTFARM_RELEASE_STATE": str(state)}
    common = ["--store", farm.store.uri, "--targets-file", str(farm.fleet)]
    if consumer == "pull":
        return _invoke(["pull", "enc", "--gpu", GPU, "--toolchain", TOOLCHAIN, "--to", str(work / "enc.plan"),
                        *common], env)
    if consumer == "triton":
        return _invoke(["triton", "enc", "--repo", str(work / "repo"), "--gpu", GPU, *common], env)
    return _invoke(["release", farm.pointer.manifest, "--reason", "matrix", *common], env)


def _verdict(result) -> tuple[int, str]:
    """(exit code, the one stderr line); a traceback fails the cell."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return result.exit_code, lines[0] if len(lines) == 1 else " | ".join(lines)


def _consumers_accept_the_untampered_farm(farm: Farm, tmp: Path) -> None:
    state = tmp / "accepted.json"
    for consumer in STORE_CONSUMERS:
        result = _cli(farm, consumer, tmp / consumer, state)
        assert _verdict(result)[0] == 0, (consumer, result.stdout, result.stderr)
    shutil.copy(state, farm.state)  # the host has accepted version 2
    shutil.copytree(tmp / "pull", farm.host)
    verified = _invoke(["verify", str(farm.host / "enc.plan"), "--gpu-name", "NVIDIA GeForce RTX 4090", "--model",
                        "enc"], farm.trust_env)
    assert verified.exit_code == 0, verified.stderr


def test_the_matrix_refuses_every_tampered_combination(farm, tmp_path):
    _consumers_accept_the_untampered_farm(farm, tmp_path)
    trust = load_trusted_keys([farm.keys["worker"][1]], "test")
    outcomes: Counter = Counter()
    failures: list[str] = []
    same: list[str] = []
    for cell in CELLS:
        name = " + ".join(f"{o}: {v}" for o, v in cell)
        objs = farm.apply(cell)
        if objs == farm.mine:  # an RTX plan is portable: another target's plan can be these very bytes
            same.append(name)
            continue
        farm.write_store(objs)
        for consumer in STORE_CONSUMERS:
            work = tmp_path / "work"
            shutil.rmtree(work, ignore_errors=True)
            state = tmp_path / "state.json"
            shutil.copy(farm.state, state)
            before = (farm.files / farm.pointer_key).read_bytes()
            code, line = _verdict(_cli(farm, consumer, work, state))
            written = [p for p in (work / "enc.plan", work / "repo" / "enc") if p.exists()]
            moved = (farm.files / farm.pointer_key).read_bytes() != before
            if code != 1 or written or moved or state.read_bytes() != farm.state.read_bytes():
                failures.append(f"{consumer} x {name}: exit {code}, wrote {written}, pointer moved {moved}: {line}")
            outcomes[consumer, code] += 1
        farm.restore()
        plan = farm.host_files(objs, tmp_path / "host")
        code, line = _verdict(_invoke(["verify", str(plan), "--gpu-name", "NVIDIA GeForce RTX 4090", "--model",
                                       "enc"], farm.trust_env))
        if code != 1:
            failures.append(f"verify x {name}: exit {code}: {line}")
        outcomes["verify", code] += 1
        try:
            load_plan(plan, expected_model="enc", installed=RTX, gpus=RTX4090, trust=trust)
            failures.append(f"load_plan x {name}: loaded")
        except (PlanMismatch, ManifestInvalid) as err:
            if "runtime refused it" in str(err):
                failures.append(f"load_plan x {name}: reached the runtime: {err}")
            outcomes["load_plan", 1] += 1
    attacks = len(CELLS) - len(same)
    print(f"\nattack matrix: {len(CELLS)} tamperings ({attacks} change a byte) x 5 consumers = "
          f"{attacks * 5} cells; refused in one line with exit 1: "
          f"{sum(n for (_, code), n in outcomes.items() if code == 1)}; identical bytes: {same}")
    assert all(s in ("plan: other target", "plan: older release") for s in same), same
    assert not failures, f"{len(failures)} cells not refused:\n" + "\n".join(failures[:40])
