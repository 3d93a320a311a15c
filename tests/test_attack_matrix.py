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

from trtfarm import layout
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import read_pointer
from trtfarm.runtime.loader import PlanMismatch, load_plan
from trtfarm.signing.bundle import sign_resources
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.signing.release_claim import sign_release, unverified_claim
from trtfarm.vocabulary.manifest import ManifestInvalid
from trtfarm.vocabulary.pointer import pointer_from_json

from .clirunner import invoke
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
        pointer = pointer_from_json(data, key)  # a stable pointer is written as schema 2: read through upgrades
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
        """Put ``objs`` in the store: the objects whose stored bytes differ are written (the plan is megabytes)."""
        for name, key in self.keys_of.items():
            path = self.files / key
            if not path.is_file() or path.read_bytes() != objs[name]:
                path.write_bytes(objs[name])

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
    return invoke(args, env={"COLUMNS": "200", **env})


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


# --- channel pointers: each attack on each channel's pointer, against pull, triton and load_plan, with and
# without trusted keys. enc on rtx-4090 gets a candidate channel: version 1 names stable's plan (T1), version 2
# goes back to the T0 plan, so the two channels serve different plans.

CHANNELS = ("stable", "candidate")
CHANNEL_ATTACKS = ("the other channel's pointer", "an older version of it", "another model's plan",
                   "its channel field edited")
CHANNEL_CELLS = list(itertools.product(CHANNEL_ATTACKS, CHANNELS, ("pull", "triton", "load_plan"), (True, False)))
OTHER = {"stable": "candidate", "candidate": "stable"}


def refused_here(attack: str, channel: str, consumer: str, keys: bool) -> bool:
    """The rule each cell is held to (docs/signing.md, "Channel pointers").

    On a host, the release beside the plan is the other channel's: a stable host refuses a candidate's, with or
    without keys (without them its channel is read unverified); a candidate host serves stable (a model without
    promotion: has no candidate). In the store, without keys only the pointer's own fields can be checked: a
    consistent older pointer (a replay) and a pointer whose channel field was edited to match its key pass.
    """
    if consumer == "load_plan" and attack in ("the other channel's pointer", "its channel field edited"):
        return channel == "stable"
    return keys or attack in ("the other channel's pointer", "another model's plan")


def _channel_farm(farm: Farm) -> dict[tuple[str, int], bytes]:
    """Give enc on rtx-4090 a candidate channel (two signed versions); each channel's pointers by version."""
    from trtfarm.releases.moves import move_release
    from trtfarm.vocabulary.promotion import Promotion

    signer, v2 = PemKeySigner(farm.keys["worker"][0]), read_pointer(farm.store, farm.pointer_key)[0]
    candidate = layout.channel_key("enc", GPU, TOOLCHAIN, "candidate")
    versions = {("stable", 1): farm.sources["older release"]["pointer"], ("stable", 2): farm.mine["pointer"]}
    for n, event in enumerate((v2.history[-1], v2.history[0]), start=1):
        m = read_stored(farm.store, event.manifest).manifest
        move_release(farm.store, event.manifest, m, release_on="built", reason=f"candidate {n}", signer=signer,
                     channel="candidate", promotion=Promotion(), rollback=n == 2)
        versions["candidate", n] = farm.store.get(candidate).data
    return versions


def _tampered(farm: Farm, versions: dict, attack: str, channel: str) -> bytes:
    """What the attack puts at ``channel``'s pointer key."""
    if attack == "the other channel's pointer":
        return versions[OTHER[channel], 2]
    if attack == "an older version of it":
        return versions[channel, 1]
    doc = json.loads(versions[channel, 2] if attack == "another model's plan" else versions[OTHER[channel], 2])
    if attack == "another model's plan":
        mlp = json.loads(farm.sources["other model"]["pointer"])
        doc.update(manifest=mlp["manifest"], plan_sha256=mlp["plan_sha256"])
    else:  # as a writer who knows the format edits it: a channel field is schema 3's
        doc.update(channel=channel, schema_version=3)
    return json.dumps(doc).encode()


def _pulled_by(farm: Farm, pointer: bytes, folder: Path) -> Path:
    """The files ``pull`` would write from the release at ``pointer``: its plan, manifest and signed claim."""
    p = pointer_from_json(pointer, "tampered")
    stored = read_stored(farm.store, p.manifest)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    plan = folder / "enc.plan"
    plan.write_bytes(farm.store.get(stored.manifest.plan.key).data)
    for suffix, data in ((".manifest.json", stored.manifest_bytes), (".provenance.json", stored.provenance),
                         (".sigstore.json", stored.signature),
                         (".release.json", json.dumps(p.claim).encode() if p.claim else None)):
        if data is not None:
            (folder / f"enc.plan{suffix}").write_bytes(data)
    return plan


def _channel_cli(farm: Farm, consumer: str, channel: str, work: Path, state: Path, keys: bool):
    env = {**(farm.trust_env if keys else {"TRTFARM_TRUSTED_KEYS": ""}), "TRTFARM_RELEASE_STATE": str(state)}
    common = ["--store", farm.store.uri, "--targets-file", str(farm.fleet), "--channel", channel]
    if consumer == "pull":
        return _invoke(["pull", "enc", "--gpu", GPU, "--toolchain", TOOLCHAIN, "--to", str(work / "enc.plan"),
                        *common], env)
    return _invoke(["triton", "enc", "--repo", str(work / "repo"), "--gpu", GPU, *common], env)


def _load(farm: Farm, plan: Path, channel: str, state: Path, keys: bool) -> str:
    """load_plan's verdict: its refusal, or ``runtime: ...`` when every check passed and the runtime (no GPU here)
    had the last word."""
    from trtfarm.signing.accepted import AcceptedReleases

    trust = load_trusted_keys([farm.keys["worker"][1]], "test") if keys else None
    try:
        load_plan(plan, expected_model="enc", installed=RTX, gpus=RTX4090, trust=trust, channel=channel,
                  store=farm.store, accepted=AcceptedReleases(state) if keys else None)
    except PlanMismatch as err:
        return ("runtime: " if "runtime's header check" in str(err) else "") + "; ".join(err.differences)
    return "loaded"


def _referee(farm: Farm, versions: dict, tmp: Path) -> None:
    """Untampered: each channel pulls, loads up to the runtime and serves its own plan with triton (its versions
    from its own history); with keys the host remembers both channels' versions."""
    for channel, keys in itertools.product(CHANNELS, (True, False)):
        work = tmp / f"ref-{channel}-{keys}"
        for consumer in ("pull", "triton"):
            result = _channel_cli(farm, consumer, channel, work, farm.state, keys)
            assert result.exit_code == 0, (channel, keys, consumer, result.stderr)
        verdict = _load(farm, work / "enc.plan", channel, farm.state, keys)
        assert verdict.startswith("runtime: the tensorrt_rtx runtime's header check"), verdict
        sha = pointer_from_json(versions[channel, 2], channel).plan_sha256
        newest = work / "repo" / "enc" / "2" / f"model.{GPU}.plan"
        assert hashlib.sha256(newest.read_bytes()).hexdigest() == sha and not (newest.parent.parent / "3").exists()
    other = pointer_from_json(versions["stable", 2], "stable").plan_sha256
    assert sha != other  # the channels serve different plans, so each repository shows whose it read
    bad = _channel_cli(farm, "triton", "canary", tmp / "bad", farm.state, True)
    assert (bad.exit_code, bad.stderr.strip()) == (2, "error: --channel 'canary': use stable or candidate")
    assert not (tmp / "bad").exists()
    memory = json.loads(farm.state.read_text())
    assert sorted(v["version"] for v in memory.values()) == [2, 2] and len(memory) == 2


def test_channel_pointers_swapped_replayed_crossed_and_relabelled_are_refused(farm, tmp_path, monkeypatch):
    monkeypatch.delenv("TRTFARM_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("TRTFARM_TARGETS", raising=False)
    monkeypatch.chdir(tmp_path)  # load_plan without keys reads no fleet file's keys
    versions = _channel_farm(farm)
    saved = farm.state.read_bytes() if farm.state.exists() else None
    farm.state.unlink(missing_ok=True)
    try:
        _referee(farm, versions, tmp_path)
        failures, refusals = _channel_cells(farm, versions, tmp_path)
    finally:
        farm.restore()
        farm.state.unlink(missing_ok=True)
        if saved is not None:
            farm.state.write_bytes(saved)
    only_with_keys = sorted({(a, c, n) for a, c, n, k in CHANNEL_CELLS if refused_here(a, c, n, True)
                             and not refused_here(a, c, n, False)})
    print(f"\nchannel cells: {len(CHANNEL_CELLS)}, refused {len(refusals)}; refused only with keys: {only_with_keys}")
    assert not failures, f"{len(failures)} channel cells not as expected:\n" + "\n".join(failures)
    assert {r.split(": ")[0] for r in refusals} >= {"other identity", "rollback", "other channel"}


def _channel_cells(farm: Farm, versions: dict, tmp: Path) -> tuple[list[str], list[str]]:
    failures, refusals = [], []
    for attack, channel, consumer, keys in CHANNEL_CELLS:
        name = f"{consumer} --channel {channel} {'with' if keys else 'without'} keys x {channel}: {attack}"
        key = layout.channel_key("enc", GPU, TOOLCHAIN, channel)
        tampered = _tampered(farm, versions, attack, channel)
        (farm.files / key).write_bytes(tampered)
        work, state = tmp / "work", tmp / "state.json"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copy(farm.state, state)
        if consumer == "load_plan":
            line = _load(farm, _pulled_by(farm, tampered, work), channel, state, keys)
            refused = line != "loaded" and not line.startswith("runtime: ")
        else:
            code, line = _verdict(_channel_cli(farm, consumer, channel, work, state, keys))
            written = [p for p in (work / "enc.plan", work / "repo" / "enc") if p.exists()]
            refused = code == 1 and not written and "\n" not in line
            if refused and state.read_bytes() != farm.state.read_bytes():
                failures.append(f"{name}: refused, but the host's memory changed")
            if not refused and code != 0:
                failures.append(f"{name}: exit {code}: {line}")
        refusals += [line.split("refused: ", 1)[-1]] if refused else []
        if refused != refused_here(attack, channel, consumer, keys):
            failures.append(f"{name}: {'refused' if refused else 'not refused'}: {line}")
        (farm.files / key).write_bytes(versions[channel, 2])
    return failures, refusals
