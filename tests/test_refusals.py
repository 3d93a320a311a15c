"""Every refusal of ``trtfarm/signing`` on its own, in milliseconds (no build): what the mutation bench runs.

Each check is met on both sides of its edge, so a mutant that weakens it (a comparison turned round, a condition
dropped, a boundary moved by one) fails here. bench/mutation_score.py runs a mutation tool over these modules.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trtfarm.errors import UserInputError
from trtfarm.signing.accepted import (
    Accepted,
    AcceptedReleases,
    check_not_frozen,
    check_not_rolled_back,
    configured_max_age,
    parse_age,
    state_path,
)
from trtfarm.signing.bundle import SignatureRefused, pae, root_digest, sign_resources, verify_resources
from trtfarm.signing.keys import PemKeySigner, load_trusted_keys
from trtfarm.signing.release_claim import ReleaseClaim, sign_release, unverified_claim, verify_release
from trtfarm.signing.verdict import check_signature

A, B, C = "a" * 64, "b" * 64, "c" * 64
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def _key(folder: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("k")
    (wp, wpub), (sp, spub) = _key(root, "worker"), _key(root, "stranger")
    return {"worker": PemKeySigner(wp), "stranger": PemKeySigner(sp),
            "trust": load_trusted_keys([wpub], "TEST_KEYS"), "both": load_trusted_keys([wpub, spub], "TEST_KEYS")}


def _edit(bundle: bytes, change) -> bytes:
    doc = json.loads(bundle)
    change(doc)
    return json.dumps(doc).encode()


def _refused(reason: str, match: str, call, *args):
    with pytest.raises(SignatureRefused, match=match) as err:
        call(*args)
    assert err.value.reason == reason and str(err.value).startswith(f"{reason}: ")
    return err.value


def test_a_signature_covers_exactly_the_files_it_names(keys):
    files = {"model.plan": A, "manifest.json": B, "provenance-x.json": C}
    bundle = sign_resources(keys["worker"], "folder", files)
    got = verify_resources(bundle, keys["trust"], files)
    assert got.resources == files and got.key.hint == keys["worker"].hint
    _refused("other bytes", r"^other bytes: provenance-x.json has sha256 aaaaaaaaaaaaaaaa…, the signature by key "
             r"\w{12} covers cccccccccccccccc… \(replaced after signing\)$",
             verify_resources, bundle, keys["trust"], {**files, "provenance-x.json": A})
    _refused("other bytes", "model.plan has sha256", verify_resources, bundle, keys["trust"], {**files,
                                                                                           "model.plan": B})
    _refused("other bytes", "^other bytes: extra.json is not covered", verify_resources, bundle, keys["trust"],
             {**files, "extra.json": A})
    _refused("other bytes", "^other bytes: the signature covers provenance-x.json, which is missing",
             verify_resources, bundle, keys["trust"], {"model.plan": A, "manifest.json": B})


def test_only_a_trusted_key_and_an_unaltered_envelope_pass(keys):
    files = {"model.plan": A}
    theirs = sign_resources(keys["stranger"], "f", files)
    err = _refused("untrusted key", r"signed by key \w{12}, which is not among the 1 trusted key\(s\) from TEST_KEYS",
                   verify_resources, theirs, keys["trust"], files)
    assert keys["stranger"].hint[:12] in str(err)
    assert verify_resources(theirs, keys["both"], files).key.hint == keys["stranger"].hint
    mine = sign_resources(keys["worker"], "f", files)
    flipped = _edit(mine, lambda d: d["dsseEnvelope"]["signatures"][0].update(
        sig=base64.b64encode(bytes(72)).decode()))
    _refused("bad signature", "does not verify with key", verify_resources, flipped, keys["trust"], files)
    elsewhere = sign_resources(keys["worker"], "g", {"model.plan": B})
    other = _edit(mine, lambda d: d["dsseEnvelope"].update(payload=json.loads(elsewhere)["dsseEnvelope"]["payload"]))
    _refused("bad signature", "the bundle was altered", verify_resources, other, keys["trust"], files)
    nohint = _edit(mine, lambda d: d["verificationMaterial"]["publicKey"].pop("hint"))
    assert verify_resources(nohint, keys["trust"], files).key.hint == keys["worker"].hint
    stranger_nohint = _edit(theirs, lambda d: d["verificationMaterial"]["publicKey"].pop("hint"))
    _refused("untrusted key", "none of the trusted keys", verify_resources, stranger_nohint, keys["trust"], files)


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(mediaType="x"), "not a model-signing bundle"),
    (lambda d: d["verificationMaterial"]["publicKey"].update(hint=5), "publicKey.hint is a int, not a string"),
    (lambda d: d["dsseEnvelope"].update(payloadType="text/plain"), "one signature over an in-toto payload"),
    (lambda d: d["dsseEnvelope"]["signatures"].append(d["dsseEnvelope"]["signatures"][0]), "one signature"),
    (lambda d: d["dsseEnvelope"].update(signatures=[]), "one signature"),
    (lambda d: d["dsseEnvelope"].update(payload=5), "dsseEnvelope.payload is a int"),
    (lambda d: d["dsseEnvelope"]["signatures"][0].update(sig=[1]), r"signatures\[0\].sig is a list"),
    (lambda d: d["dsseEnvelope"].update(payload="%%%"), "not a valid bundle"),
    (lambda d: d["dsseEnvelope"]["signatures"][0].update(sig="%%%%"), "not a valid bundle"),
    (lambda d: d.pop("dsseEnvelope"), "not a valid bundle"),
    (lambda d: d.update(verificationMaterial=5), "not a valid bundle"),
])
def test_a_malformed_bundle_is_refused_in_one_line(keys, change, match):
    bundle = _edit(sign_resources(keys["worker"], "f", {"model.plan": A}), change)
    _refused("malformed", match, verify_resources, bundle, keys["trust"], {"model.plan": A})


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", b"5", b'{"mediaType": 5}'])
def test_what_is_not_a_bundle_is_malformed(keys, data):
    _refused("malformed", ".", verify_resources, data, keys["trust"], {})


def _signed_statement(signer, statement: dict) -> bytes:
    from trtfarm.signing.bundle import sign_statement

    return sign_statement(signer, statement)


@pytest.mark.parametrize("statement, match", [
    ({"_type": "x", "predicateType": "https://model_signing/signature/v1.0"}, "not a model-signing v1.0"),
    ({"_type": "https://in-toto.io/Statement/v1", "predicateType": "other"}, "is a 'other'"),
    ({"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://model_signing/signature/v1.0",
      "subject": [{"digest": {"sha256": "00"}}], "predicate": {"resources": [
          {"name": "model.plan", "algorithm": "sha256", "digest": A}]}}, "root digest does not cover"),
    ({"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://model_signing/signature/v1.0",
      "subject": [], "predicate": {"resources": []}}, "not a model-signing statement"),
    ({"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://model_signing/signature/v1.0",
      "subject": [{"digest": {"sha256": root_digest({})}}], "predicate": {"resources": [
          {"name": 5, "algorithm": "sha256", "digest": A}]}}, "resource name is a int"),
    ([1], "not a model-signing statement"),
])
def test_a_signed_statement_that_is_not_model_signing_is_malformed(keys, statement, match):
    bundle = _signed_statement(keys["worker"], statement)
    _refused("malformed", match, verify_resources, bundle, keys["trust"], {"model.plan": A})


def test_the_resources_that_are_not_sha256_are_not_trusted(keys):
    statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://model_signing/signature/v1.0",
                 "subject": [{"digest": {"sha256": root_digest({})}}],
                 "predicate": {"resources": [{"name": "model.plan", "algorithm": "md5", "digest": A}]}}
    _refused("other bytes", "model.plan is not covered", verify_resources, _signed_statement(keys["worker"],
             statement), keys["trust"], {"model.plan": A})


def test_pae_is_dsse_v1():
    assert pae("a/b", b"xyz") == b"DSSEv1 3 a/b 3 xyz"
    assert root_digest({"b": B, "a": A}) == root_digest({"a": A, "b": B}) != root_digest({"a": B, "b": A})


def test_the_verdict_of_each_configuration(keys):
    files = {"model.plan": A}
    bundle = sign_resources(keys["worker"], "f", files)
    assert check_signature(keys["trust"], bundle, files).ok is True
    signed = check_signature(keys["trust"], bundle, files)
    assert signed.status == "signed" and signed.key.hint == keys["worker"].hint
    assert signed.detail.startswith(f"signed by trusted key {keys['worker'].hint[:12]}")
    none = check_signature(None, bundle, files)
    assert none.ok is None and none.status == "unsigned-checked" and "carries a signature, not checked" in none.detail
    assert "it is not signed" in check_signature(None, None, files).detail
    host_code = check_signature(None, bundle, files, host_code=True)
    assert host_code.ok is False and host_code.reason == "unsigned" and host_code.status == "refused"
    unsigned = check_signature(keys["trust"], None, files)
    assert unsigned.ok is False and unsigned.reason == "unsigned" and "`trtfarm sign`" in unsigned.detail
    other = check_signature(keys["trust"], bundle, {"model.plan": B})
    assert other.ok is False and other.reason == "other bytes"
    with pytest.raises(SignatureRefused, match="^other bytes: here: other bytes: "):
        other.raise_if_refused("here")
    check_signature(keys["trust"], bundle, files).raise_if_refused("here")
    none.raise_if_refused("here")


def _claim(**changes) -> ReleaseClaim:
    fields = dict(model="enc", gpu="rtx-4090", toolchain="tensorrt_rtx-1.7.1.116", manifest="plans/enc/m.json",
                  manifest_sha256=A, plan_sha256=B, exported_at="2026-01-02T00:00:00+00:00", version=3,
                  action="release", by="w", reason="r", issued_at="2026-05-01T00:00:00+00:00",
                  expires_at="2026-06-01T00:00:00+00:00")
    return ReleaseClaim(**{**fields, **changes})


def test_a_release_claim_round_trips_and_refuses_what_is_not_one(keys):
    claim = _claim()
    bundle = sign_release(keys["worker"], claim)
    key, back = verify_release(bundle, keys["trust"])
    assert back == claim and key.hint == keys["worker"].hint and back.identity == "enc/rtx-4090/tensorrt_rtx-1.7.1.116"
    assert unverified_claim(bundle) == claim and unverified_claim(5) is None and unverified_claim({}) is None
    _refused("untrusted key", "not among", verify_release, sign_release(keys["stranger"], claim), keys["trust"])
    _refused("malformed", "is a int, not a bundle", verify_release, 5, keys["trust"])
    plan_bundle = json.loads(sign_resources(keys["worker"], "f", {"model.plan": A}))
    _refused("malformed", "not a trtfarm release", verify_release, plan_bundle, keys["trust"])
    subject = json.loads(_signed_statement(keys["worker"], {
        "_type": "https://in-toto.io/Statement/v1", "predicateType": "urn:trtfarm:release:v1",
        "subject": [{"name": "other", "digest": {"sha256": A}}], "predicate": claim.model_dump()}))
    _refused("malformed", "subject is not the manifest", verify_release, subject, keys["trust"])
    typed = json.loads(_signed_statement(keys["worker"], {
        "_type": "https://in-toto.io/Statement/v1", "predicateType": "urn:trtfarm:release:v1",
        "subject": [], "predicate": {**claim.model_dump(), "version": "3"}}))
    _refused("malformed", "version: Input should be a valid integer", verify_release, typed, keys["trust"])
    badtime = sign_release(keys["worker"], _claim(expires_at="soon"))
    _refused("malformed", "expires_at 'soon' is not an ISO time", verify_release, badtime, keys["trust"])
    with pytest.raises(ValueError):
        _claim(version=0)
    with pytest.raises(ValueError):
        _claim(manifest_sha256="x")


def test_a_claim_is_frozen_after_its_expiry_or_the_hosts_age(keys):
    claim = _claim()
    check_not_frozen(claim, claim.expires(), None)  # the last second of its life
    _refused("frozen", "expired at 2026-06-01", check_not_frozen, claim, claim.expires() + timedelta(seconds=1), None)
    age = timedelta(days=10)
    check_not_frozen(claim, claim.issued() + age, age)
    _refused("frozen", "older than this host's TRTFARM_RELEASE_MAX_AGE", check_not_frozen, claim,
             claim.issued() + age + timedelta(seconds=1), age)
    naive = _claim(issued_at="2026-05-01T00:00:00", expires_at="2026-06-01T00:00:00")
    assert naive.expires() == claim.expires()
    east = _claim(expires_at="2026-06-01T02:00:00+02:00")  # the same instant, written with its offset
    assert east.expires() == claim.expires()
    _refused("frozen", "expired", check_not_frozen, east, claim.expires() + timedelta(seconds=1), None)


def test_a_host_refuses_an_older_version_and_an_unmarked_rollback():
    claim = _claim()
    check_not_rolled_back(claim, None)
    check_not_rolled_back(claim, Accepted(3, A, claim.exported_at))
    check_not_rolled_back(claim, Accepted(2, C, claim.exported_at))
    _refused("rollback", "is version 3, and this host already accepted version 4", check_not_rolled_back, claim,
             Accepted(4, A, None))
    _refused("rollback", "version 3 names manifest aaaaaaaaaaaa, and this host accepted version 3 naming cccc",
             check_not_rolled_back, claim, Accepted(3, C, None))
    later = Accepted(2, C, "2026-01-03T00:00:00+00:00")
    _refused("rollback", "goes back to an export of", check_not_rolled_back, claim, later)
    check_not_rolled_back(_claim(action="rollback"), later)
    check_not_rolled_back(claim, Accepted(2, C, claim.exported_at))
    check_not_rolled_back(_claim(exported_at=None), later)


def test_the_hosts_memory_only_grows_and_survives_a_restart(tmp_path, monkeypatch):
    path = tmp_path / "a" / "b" / "accepted.json"
    monkeypatch.setenv("TRTFARM_RELEASE_STATE", str(tmp_path / "env.json"))
    assert AcceptedReleases().path == tmp_path / "env.json" and AcceptedReleases(path).path == path
    memory = AcceptedReleases(path)
    assert memory.get("s3://b", "enc/rtx-4090/t") is None
    memory.remember("s3://b", _claim(version=3))
    memory.remember("s3://b", _claim(version=2, manifest_sha256=C))
    again = AcceptedReleases(path)
    assert again.get("s3://b", _claim().identity) == Accepted(3, A, "2026-01-02T00:00:00+00:00")
    assert again.get("file:///other", _claim().identity) is None
    again.remember("s3://b", _claim(version=4, manifest_sha256=C))
    assert AcceptedReleases(path).get("s3://b", _claim().identity).version == 4
    assert not list(path.parent.glob(".*.tmp"))
    path.write_text('{"s3://b#enc/rtx-4090/tensorrt_rtx-1.7.1.116": {"version": "x"}}')
    assert AcceptedReleases(path).get("s3://b", _claim().identity) is None
    path.write_text("[1]")
    assert AcceptedReleases(path).get("s3://b", _claim().identity) is None
    path.write_text("{not json")
    with pytest.raises(UserInputError, match="accepted-releases file cannot be read"):
        AcceptedReleases(path)


def test_ages_and_where_the_memory_lives(tmp_path):
    assert [parse_age(t) for t in ("90", "90s", "15m", "36h", "14d")] == [
        timedelta(seconds=90), timedelta(seconds=90), timedelta(minutes=15), timedelta(hours=36), timedelta(days=14)]
    for bad in ("", "0", "14w", "-1d", "1.5h"):
        with pytest.raises(UserInputError, match="is not an age"):
            parse_age(bad)
    assert configured_max_age({}) is None and configured_max_age({"TRTFARM_RELEASE_MAX_AGE": " 2h "}) == \
        timedelta(hours=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRTFARM_RELEASE_MAX_AGE", "3d")
        assert configured_max_age() == timedelta(days=3)
    assert state_path({"TRTFARM_RELEASE_STATE": str(tmp_path / "x.json")}) == tmp_path / "x.json"
    assert state_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "trtfarm" / "accepted-releases.json"
    assert state_path({}) == Path.home() / ".local" / "state" / "trtfarm" / "accepted-releases.json"
