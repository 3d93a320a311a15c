"""Signed plans with provenance: real ECDSA P-256 key pairs, real TensorRT-RTX builds, real stores (file:// and
moto's S3 server), and the commands a serving host runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trtfarm import layout
from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.publishing.attest import Attestation, read_stored
from trtfarm.publishing.gc import delete_plans, plans_to_delete
from trtfarm.publishing.publish import publish_plan, read_manifest
from trtfarm.publishing.release import read_pointer
from trtfarm.releases.moves import move_release
from trtfarm.runtime.loader import UntrustedPlan, load_plan, static_checks
from trtfarm.runtime.plan_files import find_files
from trtfarm.runtime.pull import pull_release
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.state.views import release_references
from trtfarm.store import open_store
from trtfarm.vocabulary.manifest import manifest_from_json

from . import forkcli
from .conftest import REPO, RTX_FLEET
from .conftest_builds import publish_export

TRTFARM = [sys.executable, "-m", "trtfarm"]
RTX4090 = GpuScan((LocalGpu(0, "NVIDIA GeForce RTX 4090", "8.9", 24.0),), "580.0")
RTX = {"tensorrt_rtx": "1.7.1.116", "tensorrt": None}
TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
RELEASED_FLEET = RTX_FLEET.replace("toolchain: rtx-1.7}", "toolchain: rtx-1.7, release_on: built}")


def key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """An ECDSA P-256 key pair as PEM files: the private key as openssl ecparam writes it (SEC1), the public SPKI."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    return {name: key_pair(root, name) for name in ("old", "new", "stranger")}


def trtfarm(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TRTFARM_SIGNING_KEY", "TRTFARM_TRUSTED_KEYS")}
    return forkcli.trtfarm(args, env={**base, "COLUMNS": "200", **(env or {})}, cwd=cwd or REPO, timeout=300)


def signed_store(store_uri: str, root: Path, signer, seed: int = 0, mtime: float = 1_700_000_000):
    """Build the encoder for the RTX 4090 (real TensorRT-RTX), signed by ``signer``, and release it."""
    root.mkdir(parents=True, exist_ok=True)
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    store = open_store(store_uri)
    model, outcomes = publish_export(store, fleet, root / f"export{seed}", seed, mtime, ["rtx-4090-rtx1.7"],
                                     signer=signer)
    key = outcomes["rtx-4090-rtx1.7"].manifest.removeprefix(store.uri + "/")
    assert outcomes["rtx-4090-rtx1.7"].release.action == "moved"
    return store, fleet, model, key


def pull_cli(store, fleet: Path, dest: Path, trusted: str | None) -> subprocess.CompletedProcess:
    env = {"TRTFARM_TRUSTED_KEYS": trusted} if trusted else {}
    return trtfarm("pull", "encoder", "--gpu", "rtx-4090", "--toolchain", TOOLCHAIN, "--to", str(dest),
                   "--store", store.uri, "--targets-file", str(fleet), env=env)


def verify_cli(plan: Path, trusted: str | None, *extra: str) -> subprocess.CompletedProcess:
    env = {"TRTFARM_TRUSTED_KEYS": trusted} if trusted else {}
    return trtfarm("verify", str(plan), "--gpu-name", "NVIDIA GeForce RTX 4090", *extra, env=env)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_local_build_signs_and_every_consumer_checks_the_signature(store_uri, tmp_path, example_dir, keys):
    private, public = keys["old"]
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    built = trtfarm("build", str(example_dir / "model.onnx"), "--target", "rtx-4090-rtx1.7", "--store", store_uri,
                    "--targets-file", str(fleet), "--json", env={"TRTFARM_SIGNING_KEY": str(private)})
    assert built.returncode == 0, built.stderr
    store = open_store(store_uri)
    key = json.loads(built.stdout)[0]["manifest"].removeprefix(store.uri + "/")
    stored = read_stored(store, key)
    assert stored.signature is not None and stored.provenance is not None
    assert stored.verdict(load_trusted_keys([public], "test")).ok is True

    pulled = pull_cli(store, fleet, tmp_path / "host" / "encoder.plan", str(public))
    assert pulled.returncode == 0, pulled.stderr
    assert "signature: signed by trusted key" in pulled.stdout
    checked = verify_cli(tmp_path / "host" / "encoder.plan", str(public), "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["signature"] == "signed"

    unchecked = verify_cli(tmp_path / "host" / "encoder.plan", None)  # no trust configured: never a silent ok
    assert unchecked.returncode == 0 and "unsigned-checked" in unchecked.stdout
    assert one_line(unchecked).startswith("ok, unsigned-checked: no trusted keys are configured")
    pulled = pull_cli(store, fleet, tmp_path / "host2" / "encoder.plan", None)
    assert pulled.returncode == 0 and "signature: unsigned-checked" in pulled.stderr


def _replace_together(store, key: str, tmp_path: Path) -> str:
    """An attacker with write access to the bucket: new plan bytes, a manifest with their sha256 recomputed."""
    m = read_manifest(store, key)
    evil = tmp_path / "evil.plan"
    store.download_file(m.plan.key, evil)
    data = bytearray(evil.read_bytes())
    data[-1] ^= 0xFF
    evil.write_bytes(bytes(data))
    forged = m.model_copy(update={"plan": m.plan.model_copy(update={"sha256": hashlib.sha256(data).hexdigest(),
                                                                    "bytes": len(data)})})
    store.delete(key)
    store.delete(m.plan.key)
    store.upload_file(m.plan.key, evil)
    store.put_if_absent(key, forged.to_json())
    pointer_key = layout.release_key("encoder", "rtx-4090", TOOLCHAIN)  # and the release pointer, to match
    pointer, etag = read_pointer(store, pointer_key)
    store.compare_and_swap(pointer_key, pointer.model_copy(update={"plan_sha256": forged.plan.sha256})
                           .model_dump_json().encode(), etag)
    return forged.plan.sha256


def test_a_plan_and_manifest_replaced_together_are_refused_by_verify_pull_and_load_plan(store_uri, tmp_path, keys):
    private, public = keys["old"]
    store, fleet, _, key = signed_store(store_uri, tmp_path, PemKeySigner(private))
    good = pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], tmp_path / "good" / "encoder.plan")
    trust = load_trusted_keys([public], "TRTFARM_TRUSTED_KEYS")
    old_signature = read_stored(store, key).signature
    _replace_together(store, key, tmp_path)

    pulled = pull_cli(store, fleet, tmp_path / "host" / "encoder.plan", str(public))
    assert pulled.returncode == 1
    assert "refused: other bytes: " in one_line(pulled) and "replaced after it was released" in one_line(pulled)
    assert not (tmp_path / "host" / "encoder.plan").exists()  # refused before any plan byte came down

    # the attacker also copies the old signature to the forged manifest's name: it covers other bytes
    forged = read_stored(store, key)
    store.put_if_absent(layout.signature_key(layout.folder_of(key), forged.manifest_sha256), old_signature)
    with pytest.raises(SignatureRefused, match="other bytes: "):
        pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], tmp_path / "host3" / "encoder.plan", trust=trust)
    local = tmp_path / "local"  # the forged pair as a host would hold it (plan, manifest, the copied signature)
    pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], local / "encoder.plan")
    assert (local / "encoder.plan.sigstore.json").read_bytes() == old_signature
    refused = verify_cli(local / "encoder.plan", str(public))
    assert refused.returncode == 1 and one_line(refused).startswith("refused: other bytes: ")
    assert "runtime" not in refused.stdout  # an untrusted plan is never deserialised
    with pytest.raises(UntrustedPlan, match="other bytes: "):
        load_plan(local / "encoder.plan", installed=RTX, gpus=RTX4090, trust=trust)
    os.environ["TRTFARM_TRUSTED_KEYS"] = str(public)  # the contract: the variable alone turns verification on
    try:
        with pytest.raises(UntrustedPlan, match="other bytes: "):
            load_plan(local / "encoder.plan", installed=RTX, gpus=RTX4090)
    finally:
        del os.environ["TRTFARM_TRUSTED_KEYS"]
    checks = static_checks(good.plan, find_files(good.plan).manifest, installed=RTX, gpus=RTX4090,
                           files=find_files(good.plan), trust=trust)
    assert [c.ok for c in checks] == [True] * 5  # the genuine pull still verifies


def test_a_plan_signed_by_an_untrusted_key_is_refused(tmp_path, keys):
    store, fleet, _, _ = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(keys["stranger"][0]))
    pulled = pull_cli(store, fleet, tmp_path / "host" / "encoder.plan", f"{keys['old'][1]},{keys['new'][1]}")
    assert pulled.returncode == 1
    line = one_line(pulled)
    assert "refused: untrusted key: " in line and ": signed by key " in line and "2 trusted key(s)" in line
    local = pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], tmp_path / "local" / "encoder.plan")
    refused = verify_cli(local.plan, str(keys["old"][1]))
    assert refused.returncode == 1 and one_line(refused).startswith("refused: untrusted key: ")


def test_a_rotation_keeps_old_plans_while_the_old_key_is_trusted_and_refuses_them_after(tmp_path, keys):
    (old_key, old_pub), (new_key, new_pub) = keys["old"], keys["new"]
    store, fleet, _, old_manifest = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(old_key))
    _, _, _, mid_manifest = signed_store(store.uri, tmp_path, PemKeySigner(new_key), seed=1, mtime=1_700_000_100)
    _, _, _, new_manifest = signed_store(store.uri, tmp_path, PemKeySigner(new_key), seed=2, mtime=1_700_000_200)
    both = load_trusted_keys([old_pub, new_pub], "TRTFARM_TRUSTED_KEYS")
    assert all(read_stored(store, k).verdict(both).ok for k in (old_manifest, mid_manifest, new_manifest))

    # during the rotation: roll back to the old-key plan, pull it, then release the newest again
    rolled = trtfarm("release", old_manifest, "--reason", "rotation drill", "--rollback", "--store", store.uri,
                     "--targets-file", str(fleet), env={"TRTFARM_TRUSTED_KEYS": f"{old_pub},{new_pub}",
                                                        "TRTFARM_SIGNING_KEY": str(new_key)})
    assert rolled.returncode == 0, rolled.stderr
    pulled = pull_cli(store, fleet, tmp_path / "host" / "encoder.plan", f"{old_pub},{new_pub}")
    assert pulled.returncode == 0 and f"({old_pub})" in pulled.stdout

    # gc keeps the released (old-key) plan and the newest, deletes the middle one with its provenance and signature
    doomed = plans_to_delete(store, 1, release_references(store, cache=False))
    assert [d.manifest_key for d in doomed] == [mid_manifest]
    folder = layout.folder_of(mid_manifest)
    assert sorted(k.rsplit("/", 1)[1].split("-")[0] for k in doomed[0].attestations) == ["provenance", "signature"]
    delete_plans(store, doomed)
    assert list(store.list(f"{folder}/")) == []
    for kept in (old_manifest, new_manifest):
        names = {k.rsplit("/", 1)[1] for k in store.list(f"{layout.folder_of(kept)}/")}
        sha = read_stored(store, kept).manifest_sha256
        assert names == {"model.plan", "manifest.json", layout.provenance_name(sha), layout.signature_name(sha)}

    # the old key is removed: its plans are refused by release, pull, verify and load_plan; the new ones pass
    only_new = load_trusted_keys([new_pub], "TRTFARM_TRUSTED_KEYS")
    again = trtfarm("release", old_manifest, "--reason", "after rotation", "--rollback", "--store", store.uri,
                    "--targets-file", str(fleet), env={"TRTFARM_TRUSTED_KEYS": str(new_pub),
                                                       "TRTFARM_SIGNING_KEY": str(new_key)})
    assert again.returncode == 1 and one_line(again).startswith("error: refused: untrusted key: ")
    refused = pull_cli(store, fleet, tmp_path / "old-host" / "encoder.plan", str(new_pub))
    assert refused.returncode == 1 and "refused: untrusted key: " in one_line(refused)
    assert verify_cli(tmp_path / "host" / "encoder.plan", str(new_pub)).returncode == 1
    with pytest.raises(UntrustedPlan, match="untrusted key: "):
        load_plan(tmp_path / "host" / "encoder.plan", installed=RTX, gpus=RTX4090, trust=only_new)
    move_release(store, new_manifest, read_manifest(store, new_manifest), release_on="built", reason="rotated",
                 trust=only_new, signer=PemKeySigner(new_key))
    assert pull_cli(store, fleet, tmp_path / "new-host" / "encoder.plan", str(new_pub)).returncode == 0


def test_the_fleet_file_can_hold_the_keys_and_rejects_unknown_signing_keys(tmp_path, keys):
    private, public = keys["old"]
    shutil.copy(public, tmp_path / "fleet.pub")
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET + f"signing:\n  key: {private}\n  trusted_keys: [fleet.pub]\n")
    from trtfarm.project.fleet_file import signing_settings

    settings = signing_settings(fleet, env={})
    assert settings.key == private and settings.trusted == (tmp_path / "fleet.pub",)
    store, _, _, key = signed_store((tmp_path / "store").as_uri(), tmp_path / "b", settings.signer())
    local = pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], tmp_path / "host" / "encoder.plan")
    ok = verify_cli(local.plan, None, "--targets-file", str(fleet), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["signature"] == "signed"
    assert signing_settings(fleet, env={"TRTFARM_TRUSTED_KEYS": str(keys["new"][1])}).trusted == (keys["new"][1],)

    fleet.write_text(RELEASED_FLEET + "signing:\n  trusted_key: [a.pub]\n")
    bad = verify_cli(local.plan, None, "--targets-file", str(fleet))
    assert bad.returncode == 2 and "signing.trusted_key" in bad.stderr


def test_without_trust_a_version_compatible_plan_is_refused_and_with_trust_it_needs_a_signature(tmp_path, keys):
    private, public = keys["old"]
    store, _, _, key = signed_store((tmp_path / "store").as_uri(), tmp_path, None)  # unsigned
    m = read_manifest(store, key)
    vc = m.model_copy(update={"target": m.target.model_copy(update={"version_compatible": True})})
    plan = tmp_path / "plan"
    store.download_file(m.plan.key, plan)
    unsigned = publish_plan(store, "plans/encoder/vc/unsigned", plan, lambda info: vc.model_copy(
        update={"plan": info}), attest=Attestation(lambda _m, _s: b"{}"))
    signed = publish_plan(store, "plans/encoder/vc/signed", plan, lambda info: vc.model_copy(update={"plan": info}),
                          attest=Attestation(lambda _m, _s: b"{}", PemKeySigner(private)))
    trust = load_trusted_keys([public], "test")
    assert read_stored(store, unsigned.manifest_key).verdict(None).reason == "unsigned"
    assert "version-compatible plan carries host code" in read_stored(store, unsigned.manifest_key).verdict(None).detail
    assert read_stored(store, unsigned.manifest_key).verdict(trust).ok is False
    assert read_stored(store, signed.manifest_key).verdict(trust).ok is True
    assert read_stored(store, signed.manifest_key).verdict(None).ok is False  # signed, but no trust to check it
    plain = read_stored(store, key).verdict(None)
    assert plain.ok is None and plain.detail.startswith("unsigned-checked: ")  # a plain plan: checked, says so


def test_racing_publishers_leave_one_manifest_with_its_own_signature_and_no_orphans(store_uri, tmp_path, keys):
    """The idempotent 412 path: the loser's provenance and signature describe a manifest that is not stored."""
    store = open_store(store_uri)
    source, _, _, key = signed_store((tmp_path / "src").as_uri(), tmp_path, None)
    m = read_manifest(source, key)
    plan = tmp_path / "plan"
    source.download_file(m.plan.key, plan)
    prefix, signer = "plans/encoder/race/x", PemKeySigner(keys["old"][0])
    attest = Attestation(lambda man, sha: json.dumps({"by": man.build.worker_host}).encode(), signer)
    inner = []

    def loser_manifest(info):
        # while this publisher computes its manifest, another worker publishes the same build completely
        inner.append(publish_plan(store, prefix, plan, lambda i: m.model_copy(update={
            "plan": i, "build": m.build.model_copy(update={"worker_host": "winner"})}), attest=attest))
        return m.model_copy(update={"plan": info, "build": m.build.model_copy(update={"worker_host": "loser"})})

    lost = publish_plan(store, prefix, plan, loser_manifest, attest=attest)
    assert inner[0].created and not lost.created and lost.manifest.build.worker_host == "winner"
    stored = read_stored(store, layout.manifest_key(prefix))
    names = {k.rsplit("/", 1)[1] for k in store.list(f"{prefix}/")}
    assert names == {"model.plan", "manifest.json", layout.provenance_name(stored.manifest_sha256),
                     layout.signature_name(stored.manifest_sha256)}
    assert json.loads(stored.provenance) == {"by": "winner"}
    assert stored.verdict(load_trusted_keys([keys["old"][1]], "test")).ok is True


def test_the_bundle_is_openssf_model_signing_and_its_own_verifier_accepts_it(tmp_path, keys):
    from model_signing import verifying

    store, _, _, key = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(keys["old"][0]))
    folder = Path(store.uri.removeprefix("file://")) / layout.folder_of(key)
    sha = read_stored(store, key).manifest_sha256
    signature = folder / layout.signature_name(sha)
    verifying.Config().use_elliptic_key_verifier(public_key=keys["old"][1]).verify(folder, signature)
    with pytest.raises(ValueError, match="Key mismatch"):
        verifying.Config().use_elliptic_key_verifier(public_key=keys["new"][1]).verify(folder, signature)
    (folder / layout.provenance_name(sha)).write_bytes(b"{}")
    with pytest.raises(ValueError):
        verifying.Config().use_elliptic_key_verifier(public_key=keys["old"][1]).verify(folder, signature)


def test_the_provenance_records_inputs_matching_the_manifest_and_the_worker(tmp_path, keys, monkeypatch):
    monkeypatch.setenv("TRTFARM_WORKER_NAME", "rtx-4090@builder-7")
    monkeypatch.setenv("TRTFARM_WORKER_POOL", "rtx-4090")
    monkeypatch.setenv("TRTFARM_WORKER_IMAGE", "registry.example/trtfarm-worker:rtx-1.7@sha256:" + "ab" * 32)
    store, _, model, key = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(keys["old"][0]))
    m, stored = read_manifest(store, key), read_stored(store, key)
    doc = json.loads(stored.provenance)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"] == [{"name": "model.plan", "digest": {"sha256": m.plan.sha256}}]
    build, run = doc["predicate"]["buildDefinition"], doc["predicate"]["runDetails"]
    ext, internal = build["externalParameters"], build["internalParameters"]
    assert (ext["onnx_digest"], ext["source_uri"]) == (m.model.onnx_digest, m.model.source_uri)
    assert ext["precision"]["converted_onnx_digest"] == m.precision.converted_onnx_digest
    assert internal["build_digest"] == m.build.build_digest
    assert internal["toolchain"] == {"flavour": "tensorrt_rtx", "version": m.target.toolchain_version}
    assert [(d["name"], d["digest"]["sha256"]) for d in build["resolvedDependencies"]] == \
        [(f.name, f.sha256) for f in m.model.files] == [("model.onnx", hashlib.sha256(
            model.path.read_bytes()).hexdigest())]
    assert internal["worker"]["name"] == "rtx-4090@builder-7" and internal["worker"]["pool"] == "rtx-4090"
    assert internal["worker"]["gpu"] == "none: built ahead of time on CPU"
    assert run["builder"]["id"] == "urn:trtfarm:worker:rtx-4090/rtx-4090@builder-7"
    image = next(d for d in run["builder"]["builderDependencies"] if d["name"] == "worker-image")
    assert image["digest"] == {"sha256": "ab" * 32}
    assert run["byproducts"] == [{"name": "manifest.json", "digest": {"sha256": stored.manifest_sha256}}]
    shown = trtfarm("show", key, "--store", store.uri)
    assert shown.returncode == 0 and "rtx-4090@builder-7" in shown.stdout and "sha256:" + "ab" * 32 in shown.stdout
    as_json = trtfarm("show", key, "--store", store.uri, "--json", "--provenance")
    assert json.loads(as_json.stdout) == doc


def test_triton_refuses_a_plan_no_trusted_key_signed(tmp_path, keys):
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.serving.triton import TritonRequest, triton_repositories

    store, fleet, _, _ = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(keys["stranger"][0]))
    req = TritonRequest("encoder", tmp_path / "repo", ("rtx-4090",), trust=load_trusted_keys([keys["old"][1]], "t"))
    with pytest.raises(SignatureRefused, match="untrusted key: "):
        triton_repositories(store, load_fleet(fleet), req)
    assert not (tmp_path / "repo" / "encoder").exists()
    done = trtfarm("triton", "encoder", "--repo", str(tmp_path / "repo"), "--gpu", "rtx-4090", "--store", store.uri,
                   "--targets-file", str(fleet), env={"TRTFARM_TRUSTED_KEYS": str(keys["stranger"][1])})
    assert done.returncode == 0, done.stderr
    assert "signatures: every plan signed by a trusted key" in done.stdout


def test_a_bad_signing_key_fails_the_build_before_it_starts(tmp_path, example_dir):
    (tmp_path / "rsa.pem").write_text("not a key")
    done = trtfarm("build", str(example_dir / "model.onnx"), "--store", str(tmp_path / "store"),
                   env={"TRTFARM_SIGNING_KEY": str(tmp_path / "rsa.pem")})
    assert done.returncode == 2 and "TRTFARM_SIGNING_KEY" in done.stderr and "openssl ecparam" in done.stderr
    assert not (tmp_path / "store" / "plans").exists()


def test_manifest_bytes_travel_unchanged_so_the_signature_still_covers_them(tmp_path, keys):
    store, _, _, key = signed_store((tmp_path / "store").as_uri(), tmp_path, PemKeySigner(keys["old"][0]))
    got = pull_release(store, "encoder", "rtx-4090", [TOOLCHAIN], tmp_path / "host" / "encoder.plan")
    assert got.manifest_path.read_bytes() == store.get(key).data
    assert manifest_from_json(got.manifest_path.read_bytes()).plan.sha256 == read_manifest(store, key).plan.sha256
