"""The release chain as an attacker with write access to the bucket (no worker key) tries it, case by case.

A real store (file://) with two models (``enc`` and ``mlp``, real TensorRT-RTX builds), every plan and release
signed by the workers' key, and a serving host that trusts it. Each test takes a fresh copy of that store, tampers
with it as the issue describes, and runs the commands a serving host runs.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from trtfarm import layout
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import read_pointer
from trtfarm.signing.bundle import SignatureRefused, verify_resources
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.store import open_store

from .conftest import ENCODER_PROFILE
from .conftest_builds import publish_export
from .signed_farm import GPU, OTHER_GPU, T0, build_farm
from .test_signing import TOOLCHAIN, one_line, trtfarm


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """The template (tests/signed_farm.py): enc released twice on two GPUs, mlp once, all signed."""
    return build_farm(tmp_path_factory.mktemp("chain"))


@pytest.fixture
def host(farm, tmp_path):
    """A fresh copy of the farm's store, and the environment of a serving host that trusts the workers' key."""
    shutil.copytree(farm["root"] / "store", tmp_path / "store")
    store = open_store((tmp_path / "store").as_uri())
    env = {"TRTFARM_TRUSTED_KEYS": str(farm["keys"]["worker"][1]),
           "TRTFARM_RELEASE_STATE": str(tmp_path / "state" / "accepted.json")}
    return store, env, tmp_path


def pull(store, env, dest: Path, model: str = "enc", fleet: Path | None = None):
    return trtfarm("pull", model, "--gpu", GPU, "--toolchain", TOOLCHAIN, "--to", str(dest), "--store", store.uri,
                   *(["--targets-file", str(fleet)] if fleet else []), env=env)


def pointer_of(store, model: str, gpu: str = GPU):
    return read_pointer(store, layout.release_key(model, gpu, TOOLCHAIN))


def write_pointer(store, model: str, data: bytes, gpu: str = GPU) -> None:
    key = layout.release_key(model, gpu, TOOLCHAIN)
    store.compare_and_swap(key, data, store.get(key).etag)


def refused(done, reason: str) -> str:
    """The one line of a refusal (exit 1, no traceback), which names ``reason``."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    line = one_line(done)
    assert "Traceback" not in done.stderr and f"refused: {reason}: " in line, line
    return line


def test_1_another_models_signed_plan_is_not_served_under_this_name(farm, host):
    store, env, tmp = host
    enc, _ = pointer_of(store, "enc")
    mlp, _ = pointer_of(store, "mlp")
    # the pointer edited to name mlp's validly signed manifest (its plan digest too)
    forged = enc.model_copy(update={"manifest": mlp.manifest, "plan_key": mlp.plan_key,
                                    "plan_sha256": mlp.plan_sha256})
    write_pointer(store, "enc", forged.model_dump_json().encode())
    line = refused(pull(store, env, tmp / "a" / "enc.plan", fleet=farm["fleet"]), "other identity")
    assert "asks for enc/rtx-4090/" in line and "is of mlp/rtx-4090/" in line
    assert not (tmp / "a").exists()
    # the same without trusted keys: identity does not need a key
    line = refused(pull(store, {"TRTFARM_RELEASE_STATE": env["TRTFARM_RELEASE_STATE"]}, tmp / "b" / "enc.plan",
                        fleet=farm["fleet"]), "other identity")
    assert not (tmp / "b").exists()


def test_1_a_copied_signed_folder_is_another_identitys_folder(farm, host):
    store, env, tmp = host
    enc, _ = pointer_of(store, "enc")
    mlp, _ = pointer_of(store, "mlp")
    src, dst = layout.folder_of(mlp.manifest), layout.folder_of(enc.manifest)
    for key in list(store.list(f"{dst}/")):
        store.delete(key)
    for key in store.list(f"{src}/"):
        store.put_if_absent(f"{dst}/{key.rsplit('/', 1)[1]}", store.get(key).data)
    pointer, _ = pointer_of(store, "enc")
    write_pointer(store, "enc", pointer.model_copy(update={"plan_sha256": mlp.plan_sha256}).model_dump_json().encode())
    line = refused(pull(store, env, tmp / "host" / "enc.plan", fleet=farm["fleet"]), "other identity")
    assert "enc/rtx-4090" in line and "mlp/rtx-4090" in line
    assert not (tmp / "host").exists()


def test_1_triton_refuses_swapped_pointers_and_writes_nothing(farm, host):
    store, env, tmp = host
    for gpu in (GPU, OTHER_GPU):
        enc, _ = pointer_of(store, "enc", gpu)
        mlp, _ = pointer_of(store, "mlp", gpu)
        write_pointer(store, "enc", mlp.model_dump_json().encode(), gpu)
    done = trtfarm("triton", "enc", "--repo", str(tmp / "repo"), "--store", store.uri, "--targets-file",
                   str(farm["fleet"]), env=env)
    assert "other identity" in refused(done, "other identity")
    assert not (tmp / "repo" / "enc").exists()


def test_2_a_host_refuses_an_older_release_served_again_and_a_frozen_one(farm, host):
    store, env, tmp = host
    assert pull(store, env, tmp / "now" / "enc.plan", fleet=farm["fleet"]).returncode == 0
    accepted = json.loads(Path(env["TRTFARM_RELEASE_STATE"]).read_text())
    assert [e["version"] for e in accepted.values()] == [2]
    write_pointer(store, "enc", farm["v1"])  # last month's pointer, its claim validly signed (version 1)
    line = refused(pull(store, env, tmp / "old" / "enc.plan", fleet=farm["fleet"]), "rollback")
    assert "version 1" in line and "already accepted version 2" in line
    assert not (tmp / "old").exists()

    # a claim validly signed long ago and never refreshed: expired, or older than the host's limit
    from trtfarm.signing.release_claim import ReleaseClaim, sign_release

    pointer, _ = pointer_of(store, "enc")
    stored = read_stored(store, pointer.manifest)
    signer = PemKeySigner(farm["keys"]["worker"][0])
    old = ReleaseClaim(model="enc", gpu=GPU, toolchain=TOOLCHAIN, manifest=pointer.manifest,
                       manifest_sha256=stored.manifest_sha256, plan_sha256=pointer.plan_sha256,
                       exported_at=pointer.exported_at, version=5, action="release", by="w", reason="r",
                       issued_at="2020-01-01T00:00:00+00:00", expires_at="2020-02-01T00:00:00+00:00")
    write_pointer(store, "enc", pointer.model_copy(update={"claim": sign_release(signer, old), "version": 5})
                  .model_dump_json().encode())
    assert "expired at 2020-02-01" in refused(pull(store, env, tmp / "f" / "enc.plan", fleet=farm["fleet"]),
                                              "frozen")
    stale = old.model_copy(update={"expires_at": "2999-01-01T00:00:00+00:00"})
    write_pointer(store, "enc", pointer.model_copy(update={"claim": sign_release(signer, stale), "version": 5})
                  .model_dump_json().encode())
    line = refused(pull(store, {**env, "TRTFARM_RELEASE_MAX_AGE": "14d"}, tmp / "g" / "enc.plan",
                        fleet=farm["fleet"]), "frozen")
    assert "older than this host's TRTFARM_RELEASE_MAX_AGE" in line
    assert not (tmp / "f").exists() and not (tmp / "g").exists()


def test_2_an_operators_signed_rollback_goes_through_and_is_recorded(farm, host):
    store, env, tmp = host
    assert pull(store, env, tmp / "now" / "enc.plan", fleet=farm["fleet"]).returncode == 0
    history = pointer_of(store, "enc")[0].history
    old_manifest = history[0].manifest
    operator = {**env, "TRTFARM_SIGNING_KEY": str(farm["keys"]["worker"][0])}
    plain = trtfarm("release", old_manifest, "--reason", "bad numbers", "--store", store.uri, "--targets-file",
                    str(farm["fleet"]), env=operator)
    assert plain.returncode == 2 and "--rollback" in plain.stderr  # going back needs saying so
    unsigned = trtfarm("release", old_manifest, "--reason", "x", "--rollback", "--store", store.uri,
                       "--targets-file", str(farm["fleet"]), env=env)
    assert unsigned.returncode == 2 and "TRTFARM_SIGNING_KEY" in unsigned.stderr
    rolled = trtfarm("release", old_manifest, "--reason", "bad numbers in v2", "--rollback", "--store", store.uri,
                     "--targets-file", str(farm["fleet"]), env=operator)
    assert rolled.returncode == 0, rolled.stderr
    assert "rollback by" in rolled.stdout and "version 3 signed" in rolled.stdout
    back = pull(store, env, tmp / "back" / "enc.plan", fleet=farm["fleet"], model="enc")
    assert back.returncode == 0, back.stderr
    assert "release: release version 3 (rollback by" in back.stdout
    pointer, _ = pointer_of(store, "enc")
    assert pointer.manifest == old_manifest and pointer.current.action == "rollback"
    assert pointer.current.reason == "bad numbers in v2"


def test_3_signing_an_existing_store(farm, tmp_path):
    fleet = farm["fleet"]
    store = open_store((tmp_path / "store").as_uri())
    publish_export(store, fleet, tmp_path / "e", 0, T0, ["rtx-4090-rtx1.7", "rtx3090-rtx1.7-o5"], name="enc")
    env = {"TRTFARM_TRUSTED_KEYS": str(farm["keys"]["worker"][1]),
           "TRTFARM_RELEASE_STATE": str(tmp_path / "accepted.json")}
    line = refused(pull(store, env, tmp_path / "a" / "enc.plan", fleet=fleet), "unsigned release")
    assert "`trtfarm sign`" in line or "trtfarm sign" in line
    # turning the key on: the build finds the plans up to date and says they are unsigned, and what signs them
    built = trtfarm("build", str(tmp_path / "e" / "model.onnx"), "--name", "enc", "--target", "rtx-4090-rtx1.7",
                    *[a for p in ENCODER_PROFILE for a in ("--profile", p)], "--store", store.uri,
                    "--targets-file", str(fleet), "--json", env={"TRTFARM_SIGNING_KEY": str(farm["keys"]["worker"][0])})
    assert built.returncode == 0, built.stderr
    [row] = json.loads(built.stdout)
    assert row["status"] == "up-to-date" and "unsigned (published before signing was on): trtfarm sign" in \
        row["reason"]
    # a plan someone replaced is re-hashed and refused, never signed
    enc5090, _ = pointer_of(store, "enc", OTHER_GPU)
    damaged = store.get(enc5090.plan_key).data
    store.delete(enc5090.plan_key)
    store.put_if_absent(enc5090.plan_key, damaged[:-1] + bytes([damaged[-1] ^ 1]))
    signed = trtfarm("sign", "--store", store.uri, "--targets-file", str(fleet), "--json",
                     env={"TRTFARM_SIGNING_KEY": str(farm["keys"]["worker"][0])})
    assert signed.returncode == 1, signed.stderr
    doc = json.loads(signed.stdout)
    assert len(doc["signed_plans"]) == 1 and doc["signed_releases"] == [layout.release_key("enc", GPU, TOOLCHAIN)]
    assert len(doc["refused"]) == 2 and any("sha256" in r for r in doc["refused"])
    assert read_stored(store, enc5090.manifest).signature is None
    got = pull(store, env, tmp_path / "b" / "enc.plan", fleet=fleet)
    assert got.returncode == 0, got.stderr
    assert "signature: signed by trusted key" in got.stdout and "release version 2 (refresh" in got.stdout
    again = trtfarm("sign", "--store", store.uri, "--targets-file", str(fleet), "enc",
                    env={"TRTFARM_SIGNING_KEY": str(farm["keys"]["worker"][0])})
    assert "0 plan(s) and 0 release(s) signed, 1 already signed" in again.stdout
    nokey = trtfarm("sign", "--store", store.uri, "--targets-file", str(fleet))
    assert nokey.returncode == 2 and "TRTFARM_SIGNING_KEY" in nokey.stderr


def test_4_a_bundle_with_a_number_for_a_hint_is_refused_in_one_line(farm, host):
    store, env, tmp = host
    pointer, _ = pointer_of(store, "enc")
    stored = read_stored(store, pointer.manifest)
    key = layout.signature_key(layout.folder_of(pointer.manifest), stored.manifest_sha256)
    doc = json.loads(stored.signature)
    doc["verificationMaterial"]["publicKey"]["hint"] = 5
    store.delete(key)
    store.put_if_absent(key, json.dumps(doc).encode())
    line = refused(pull(store, env, tmp / "h" / "enc.plan", fleet=farm["fleet"]), "malformed")
    assert "publicKey.hint is a int" in line


def test_4_show_says_when_the_provenance_describes_another_plan(farm, host):
    store, _, _ = host
    enc, _ = pointer_of(store, "enc")
    mlp, _ = pointer_of(store, "mlp")
    mine, theirs = read_stored(store, enc.manifest), read_stored(store, mlp.manifest)
    prov = layout.provenance_key(layout.folder_of(enc.manifest), mine.manifest_sha256)
    store.delete(prov)
    store.put_if_absent(prov, theirs.provenance)
    shown = trtfarm("show", enc.manifest, "--store", store.uri)
    assert shown.returncode == 1 and "provenance" in shown.stdout
    assert "the provenance's subject is sha256 " + mlp.plan_sha256[:16] in one_line(shown)
    as_json = trtfarm("show", enc.manifest, "--store", store.uri, "--json", "--provenance")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["subject"][0]["digest"]["sha256"] == mlp.plan_sha256


def test_5_a_swapped_provenance_is_other_bytes_for_every_consumer(farm, host):
    store, env, tmp = host
    enc, _ = pointer_of(store, "enc")
    mlp, _ = pointer_of(store, "mlp")
    mine, theirs = read_stored(store, enc.manifest), read_stored(store, mlp.manifest)
    trust = load_trusted_keys([farm["keys"]["worker"][1]], "test")
    names = layout.PLAN_NAME, layout.MANIFEST_NAME, layout.provenance_name(mine.manifest_sha256)
    actual = {names[0]: enc.plan_sha256, names[1]: mine.manifest_sha256,
              names[2]: read_stored(store, mlp.manifest).manifest_sha256}
    with pytest.raises(SignatureRefused, match=r"^other bytes: provenance-.* has sha256 .* covers "):
        verify_resources(mine.signature, trust, actual)
    prov = layout.provenance_key(layout.folder_of(enc.manifest), mine.manifest_sha256)
    store.delete(prov)
    store.put_if_absent(prov, theirs.provenance)
    assert "(replaced after signing)" in refused(pull(store, env, tmp / "p" / "enc.plan", fleet=farm["fleet"]),
                                                 "other bytes")


def test_6_a_pointer_whose_manifest_was_replaced_is_a_tampered_store_exit_1(farm, host):
    store, env, tmp = host
    enc, _ = pointer_of(store, "enc")
    m = read_stored(store, enc.manifest)
    forged = m.manifest.model_copy(update={"plan": m.manifest.plan.model_copy(update={"sha256": "0" * 64})})
    store.delete(enc.manifest)
    store.put_if_absent(enc.manifest, forged.to_json())
    for trusted in (env, {"TRTFARM_RELEASE_STATE": env["TRTFARM_RELEASE_STATE"]}):
        line = refused(pull(store, trusted, tmp / "t" / "enc.plan", fleet=farm["fleet"]), "tampered")
        assert "re-release" not in line and "outside trtfarm" in line
    assert not (tmp / "t").exists()


def test_the_release_claim_expires_after_the_configured_time(farm, host):
    from trtfarm.releases.moves import move_release

    store, env, tmp = host
    _, mlp_old = pointer_of(store, "mlp")
    pointer, _ = pointer_of(store, "mlp")
    stored = read_stored(store, pointer.manifest)
    move_release(store, pointer.manifest, stored.manifest, release_on="built", reason="short", force=True,
                 signer=PemKeySigner(farm["keys"]["worker"][0]), expiry=timedelta(seconds=-1))
    assert "expired at" in refused(pull(store, env, tmp / "x" / "mlp.plan", "mlp", farm["fleet"]), "frozen")
