"""The release chain's refusals in process and in milliseconds: a farm of made-up plan bytes, really signed.

The plans are not TensorRT plans (the chain never parses one: it hashes it); the manifest is a real one
(tests/data/manifest_encoder_rtx4090.json) with model, GPU, export time and plan changed, published through the
real publish protocol with real signatures, released with real signed claims (tests/chain_farm.py).
tests/test_release_chain.py does the same through the command line on real builds; this file is what the mutation
bench runs for the publishing and runtime modules.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from trtfarm import layout
from trtfarm.errors import CorruptObject
from trtfarm.publishing.attest import Attestation, read_stored
from trtfarm.publishing.gc import plans_to_delete
from trtfarm.publishing.publish import publish_plan
from trtfarm.publishing.release import ReleaseRefused, refresh_release
from trtfarm.publishing.release_check import check_release, manifest_identity_problem
from trtfarm.publishing.sign_store import sign_store
from trtfarm.releases.moves import move_release
from trtfarm.runtime.loader import signature_check, static_checks
from trtfarm.runtime.plan_files import PlanFiles
from trtfarm.runtime.pull import pull_release
from trtfarm.signing.accepted import AcceptedReleases
from trtfarm.signing.release_claim import sign_release, unverified_claim
from trtfarm.state.views import release_references
from trtfarm.vocabulary.manifest import manifest_from_json

from .chain_farm import T0, T1, TC, Farm, refused


@pytest.fixture
def farm(tmp_path):
    return Farm(tmp_path / "farm")


def test_a_genuine_release_is_pulled_remembered_and_written_beside_the_plan(farm):
    got = farm.pull()
    assert got.release.claim.version == 2 and got.verdict.ok is True
    assert got.release.detail.startswith("release version 2 (release by ")
    assert farm.memory.get(farm.store.uri, "enc/rtx-4090/" + TC).version == 2
    beside = json.loads((farm.root / "host" / "enc.plan.release.json").read_bytes())
    assert unverified_claim(beside) == got.release.claim
    assert AcceptedReleases(farm.root / "accepted.json").get(farm.store.uri, "enc/rtx-4090/" + TC).version == 2
    plain = farm.pull("plain", trust=False, memory=False)
    assert plain.release.claim is None and plain.release.detail.startswith("release unsigned-checked")
    assert not (farm.root / "plain" / "enc.plan.sigstore.json").exists() or plain.verdict.ok is None


def test_the_pointer_manifest_and_folder_must_name_what_was_asked(farm):
    enc, _ = farm.pointer()
    mlp, _ = farm.pointer("mlp")
    farm.put_pointer(enc.model_copy(update={"manifest": mlp.manifest, "plan_sha256": mlp.plan_sha256}))
    for trust in (True, False):
        refused("other identity", r"asks for enc/rtx-4090/.*, but the manifest it names .* is of mlp/rtx-4090/",
                 farm.pull, trust=trust)
    farm.put_pointer(mlp)
    refused("other identity", r"asks for enc/rtx-4090/.*, but the pointer there names mlp/rtx-4090/", farm.pull)
    other, _ = farm.pointer("enc", "rtx-3090")
    farm.put_pointer(other)
    refused("other identity", "but the pointer there names enc/rtx-3090/", farm.pull)
    assert not (farm.root / "host").exists()


def test_a_folder_copied_under_another_identity_and_a_replaced_manifest(farm):
    enc, _ = farm.pointer()
    mlp, _ = farm.pointer("mlp")
    assert manifest_identity_problem(enc.manifest, read_stored(farm.store, enc.manifest).manifest) is None
    mine = read_stored(farm.store, enc.manifest)
    theirs = read_stored(farm.store, mlp.manifest)
    assert "is in the folder of enc/rtx-4090" in manifest_identity_problem(enc.manifest, theirs.manifest)
    assert manifest_identity_problem("not/a/plan/key", theirs.manifest) is None
    farm.store.delete(enc.manifest)
    farm.store.put_if_absent(enc.manifest, theirs.manifest_bytes)
    farm.put_pointer(enc.model_copy(update={"plan_sha256": mlp.plan_sha256}))
    refused("other identity", "is of mlp/rtx-4090/", farm.pull, trust=False)
    same_identity = mine.manifest.model_copy(update={"plan": mine.manifest.plan.model_copy(update={
        "key": theirs.manifest.plan.key.replace("mlp", "enc", 1)})})
    assert "it was copied from elsewhere" in manifest_identity_problem(enc.manifest, same_identity)
    farm.store.delete(enc.manifest)
    farm.store.put_if_absent(enc.manifest, mine.manifest_bytes)
    farm.put_pointer(enc.model_copy(update={"plan_sha256": "0" * 64}))
    err = refused("tampered", "names plan sha256 0000000000000000, but the manifest it points at", farm.pull,
                   trust=False)
    assert "re-release" not in str(err)
    farm.store.delete(enc.manifest)
    refused("tampered", "which is not in the store", farm.pull, trust=False)


def test_with_trusted_keys_the_release_must_be_signed_for_this_identity_and_these_bytes(farm):
    enc, _ = farm.pointer()
    mlp, _ = farm.pointer("mlp")
    farm.put_pointer(enc.model_copy(update={"claim": None}))
    err = refused("unsigned release", "carries no signed release, and verification is on", farm.pull)
    assert "`trtfarm sign`" in str(err)
    assert farm.pull("plain", trust=False).release.claim is None
    claim = unverified_claim(enc.claim)
    farm.put_pointer(enc.model_copy(update={"claim": sign_release(farm.stranger, claim)}))
    refused("untrusted key", "not among", farm.pull)
    farm.put_pointer(enc.model_copy(update={"claim": mlp.claim}))
    refused("other identity", "but its signed release is of mlp/rtx-4090/", farm.pull)
    for change, reason, match in (({"manifest": "plans/enc/x/manifest.json"}, "other identity", "names plans/enc/x"),
                                  ({"manifest_sha256": "1" * 64}, "other bytes", "manifest sha256 1111"),
                                  ({"plan_sha256": "2" * 64}, "other bytes", r"\(plan 2222")):
        farm.put_pointer(enc.model_copy(update={"claim": sign_release(farm.signer, claim.model_copy(update=change))}))
        refused(reason, match, farm.pull)
    farm.put_pointer(enc.model_copy(update={"claim": {"mediaType": 5}}))
    refused("malformed", "not a model-signing bundle", farm.pull)
    farm.put_pointer(json.dumps({**json.loads(enc.model_dump_json()), "claim": 5}).encode())
    with pytest.raises(CorruptObject, match="claim: Input should be"):
        farm.pull()
    assert not (farm.root / "host").exists()


def test_a_host_refuses_a_rollback_and_a_freeze(farm):
    v2, _ = farm.pointer()
    farm.pull()
    v1 = v2.model_copy(update={"manifest": farm.keys["enc", "rtx-4090", T0], "version": 1, "claim": sign_release(
        farm.signer, unverified_claim(v2.claim).model_copy(update={
            "version": 1, "manifest": farm.keys["enc", "rtx-4090", T0],
            "manifest_sha256": read_stored(farm.store, farm.keys["enc", "rtx-4090", T0]).manifest_sha256,
            "plan_sha256": read_stored(farm.store, farm.keys["enc", "rtx-4090", T0]).manifest.plan.sha256,
            "exported_at": T0}))})
    v1 = v1.model_copy(update={"plan_sha256": unverified_claim(v1.claim).plan_sha256})
    farm.put_pointer(v1)
    refused("rollback", "is version 1, and this host already accepted version 2", farm.pull, to="old")
    assert farm.pull("fresh-host", memory=False).release.claim.version == 1  # a host that never saw v2
    up = unverified_claim(v1.claim).model_copy(update={"version": 7})
    farm.put_pointer(v1.model_copy(update={"claim": sign_release(farm.signer, up)}))
    refused("rollback", "goes back to an export of", farm.pull, to="old")
    farm.put_pointer(v1.model_copy(update={"claim": sign_release(farm.signer, up.model_copy(update={
        "action": "rollback"}))}))
    assert farm.pull("back").release.claim.version == 7
    assert farm.memory.get(farm.store.uri, "enc/rtx-4090/" + TC).version == 7
    claim = unverified_claim(v2.claim)
    past = datetime.now(timezone.utc) - timedelta(days=1)
    farm.put_pointer(v2.model_copy(update={"claim": sign_release(farm.signer, claim.model_copy(update={
        "version": 9, "expires_at": past.isoformat()}))}))
    refused("frozen", "expired at", farm.pull, to="frozen")
    farm.put_pointer(v2.model_copy(update={"claim": sign_release(farm.signer, claim.model_copy(update={
        "version": 9, "issued_at": (past - timedelta(days=20)).isoformat(),
        "expires_at": (past + timedelta(days=60)).isoformat()}))}))
    refused("frozen", "older than this host's", farm.pull, to="frozen", max_age=timedelta(days=14))
    assert farm.pull("ok", max_age=timedelta(days=30)).release.claim.version == 9


def test_release_signs_versions_that_grow_and_refuses_what_it_cannot_vouch_for(farm):
    key = farm.keys["enc", "rtx-4090", T0]
    m = read_stored(farm.store, key).manifest
    with pytest.raises(ReleaseRefused, match="--rollback"):
        move_release(farm.store, key, m, release_on="built", reason="x", signer=farm.signer)
    with pytest.raises(ReleaseRefused, match="reason is empty"):
        move_release(farm.store, key, m, release_on="built", reason=" ")
    back = move_release(farm.store, key, m, release_on="built", reason="numbers", rollback=True, signer=farm.signer,
                        trust=farm.trust, accepted=farm.memory)
    claim = unverified_claim(back.claim)
    assert (back.version, claim.version, claim.action, back.current.action) == (3, 3, "rollback", "rollback")
    assert farm.memory.get(farm.store.uri, claim.identity).version == 3
    assert move_release(farm.store, key, m, release_on="built", reason="again", signer=farm.signer) == back
    unsigned = move_release(farm.store, farm.keys["enc", "rtx-4090", T1], read_stored(
        farm.store, farm.keys["enc", "rtx-4090", T1]).manifest, release_on="built", reason="no key")
    assert unsigned.claim is None and unsigned.version == 4
    # another identity's manifest at this key, a tampered pointer, a plan replaced after signing
    mlp = farm.keys["mlp", "rtx-4090", T1]
    enc, _ = farm.pointer()
    farm.put_pointer(enc.model_copy(update={"manifest": mlp, "plan_sha256": read_stored(
        farm.store, mlp).manifest.plan.sha256}))
    err = refused("other identity", "not released: .*; `--force` replaces it", move_release, farm.store, key, m,
                   release_on="built", reason="x", signer=farm.signer)
    assert "mlp" in str(err)
    forced = move_release(farm.store, key, m, release_on="built", reason="repair", force=True, rollback=True,
                          signer=farm.signer)
    assert forced.manifest == key and forced.current.action == "forced" and forced.version == 5
    stranger = enc.model_copy(update={"manifest": key, "plan_sha256": m.plan.sha256, "claim": sign_release(
        farm.stranger, unverified_claim(forced.claim))})
    farm.put_pointer(stranger)
    refused("untrusted key", "`--force` replaces it", move_release, farm.store, farm.keys["enc", "rtx-4090", T1],
             read_stored(farm.store, farm.keys["enc", "rtx-4090", T1]).manifest, release_on="built", reason="x",
             trust=farm.trust, signer=farm.signer)
    plan_key = m.plan.key
    farm.store.delete(plan_key)
    farm.store.put_if_absent(plan_key, b"\x00" * m.plan.bytes)
    refused("other bytes", "not released: .*sha256", move_release, farm.store, key, m, release_on="built",
             reason="x", trust=farm.trust, force=True, signer=farm.signer)


def test_release_refuses_an_unsigned_plan_and_a_manifest_in_another_folder(tmp_path):
    farm = Farm(tmp_path / "u", signed=False)
    key = farm.keys["enc", "rtx-4090", T0]
    refused("unsigned", "not released: .*no signature", move_release, farm.store, key,
             read_stored(farm.store, key).manifest, release_on="built", reason="x", trust=farm.trust, rollback=True)
    mlp = read_stored(farm.store, farm.keys["mlp", "rtx-4090", T1])
    farm.store.delete(key)
    farm.store.put_if_absent(key, mlp.manifest_bytes)
    refused("other identity", "not released: .* is of mlp", move_release, farm.store, key, mlp.manifest,
             release_on="built", reason="x")


def test_sign_signs_an_unsigned_store_refreshes_claims_and_refuses_damage(tmp_path):
    farm = Farm(tmp_path / "u", signed=False)
    damaged = read_stored(farm.store, farm.keys["enc", "rtx-3090", T1]).manifest
    farm.store.delete(damaged.plan.key)
    farm.store.put_if_absent(damaged.plan.key, b"\x01" * damaged.plan.bytes)
    lines = []
    done = sign_store(farm.store, farm.signer, note=lines.append)
    assert len(done.plans) == 3 and done.already == 0 and len(done.refused) == 2
    assert sorted(done.releases) == [layout.release_key("enc", "rtx-4090", TC), layout.release_key("mlp", "rtx-4090",
                                                                                                    TC)]
    assert any("sha256" in r for r in done.refused) and any("is not signed" in r for r in done.refused)
    assert sorted(lines) == sorted([f"signed {layout.short_ref(k)}" for k in done.plans] + [  # each step, said
        f"refused: {r}" for r in done.refused] + [f"signed the release {k}" for k in done.releases])
    assert done.to_json() == {  # `trtfarm sign --json`
        "signed_plans": done.plans, "signed_releases": done.releases, "refused": done.refused, "already_signed": 0}
    got = farm.pull()
    assert got.verdict.ok is True and got.release.claim.action == "refresh" and got.release.claim.version == 3
    again = sign_store(farm.store, farm.signer, ["enc"])
    assert (len(again.plans), again.releases, again.already) == (0, [], 2)
    soon = sign_store(farm.store, farm.signer, ["enc"], refresh_within=timedelta(days=40))
    assert soon.releases == [layout.release_key("enc", "rtx-4090", TC)]
    mlp = read_stored(farm.store, farm.keys["mlp", "rtx-4090", T1])
    copied = farm.keys["enc", "rtx-4090", T0]
    farm.store.delete(copied)
    farm.store.delete(layout.signature_key(layout.folder_of(copied), read_stored(
        farm.store, farm.keys["enc", "rtx-4090", T1]).manifest_sha256))
    farm.store.put_if_absent(copied, mlp.manifest_bytes)
    refused = sign_store(farm.store, farm.signer, ["enc"])
    assert any("is in the folder of enc/rtx-4090" in r for r in refused.refused)


def test_refresh_signs_the_same_manifest_again_and_never_a_tampered_pointer(farm):
    key = layout.release_key("enc", "rtx-4090", TC)
    before, _ = farm.pointer()
    after = refresh_release(farm.store, key, farm.signer, reason="nightly")
    claim = unverified_claim(after.claim)
    assert (after.manifest, after.version, claim.version, claim.action) == (before.manifest, 3, 3, "refresh")
    assert refresh_release(farm.store, layout.release_key("nope", "rtx-4090", TC), farm.signer, reason="x") is None
    mlp, _ = farm.pointer("mlp")
    farm.put_pointer(mlp)
    refused("other identity", "names mlp", refresh_release, farm.store, key, farm.signer, reason="x")


def test_gc_keeps_what_a_tampered_pointer_or_a_copied_manifest_touches(farm):
    doomed = plans_to_delete(farm.store, 1, release_references(farm.store, cache=False))
    assert [d.manifest_key for d in doomed] == [farm.keys["enc", "rtx-4090", T0]]
    enc, _ = farm.pointer()
    mlp, _ = farm.pointer("mlp")
    farm.put_pointer(mlp)
    skipped: list[str] = []
    assert plans_to_delete(farm.store, 1, release_references(farm.store, cache=False), skipped) == []
    assert any("gc keeps every plan of enc/rtx-4090/" in s for s in skipped)
    farm.put_pointer(enc)
    doomed = plans_to_delete(farm.store, 1, release_references(farm.store, cache=False))
    assert [d.manifest_key for d in doomed] == [farm.keys["enc", "rtx-4090", T0]]
    farm.store.delete(farm.keys["enc", "rtx-4090", T0])
    farm.store.put_if_absent(farm.keys["enc", "rtx-4090", T0], read_stored(farm.store, mlp.manifest).manifest_bytes)
    skipped = []
    assert plans_to_delete(farm.store, 1, release_references(farm.store, cache=False), skipped) == []
    assert any("it was copied from elsewhere" in s and "gc keeps it" in s for s in skipped)


def test_check_release_without_freshness_still_refuses_a_rollback(farm):
    key = layout.release_key("enc", "rtx-4090", TC)
    pointer, _ = farm.pointer()
    stored = read_stored(farm.store, pointer.manifest)
    late = datetime(2999, 1, 1, tzinfo=timezone.utc)
    refused("frozen", "expired", check_release, farm.store, key, pointer, stored, farm.trust, now=late)
    assert check_release(farm.store, key, pointer, stored, farm.trust, now=late, freshness=False).claim.version == 2
    farm.memory.remember(farm.store.uri, unverified_claim(pointer.claim).model_copy(update={"version": 5}))
    refused("rollback", "already accepted version 5", check_release, farm.store, key, pointer, stored, farm.trust,
             farm.memory, freshness=False)


def test_the_loader_checks_the_signed_release_beside_a_plan(farm):
    got = farm.pull()
    mine = read_stored(farm.store, got.release.claim.manifest)
    plan = got.plan

    def files(release: bytes | None, manifest_bytes: bytes = mine.manifest_bytes) -> PlanFiles:
        return PlanFiles(plan, got.manifest_path, manifest_from_json(manifest_bytes), manifest_bytes,
                         mine.signature, mine.provenance, release)

    sha = mine.manifest.plan.sha256
    claim_bytes = (farm.root / "host" / "enc.plan.release.json").read_bytes()
    assert signature_check(files(claim_bytes), farm.trust, sha).ok is True
    assert signature_check(files(None), farm.trust, sha).ok is True
    assert signature_check(files(claim_bytes), None, sha).ok is None
    mlp, _ = farm.pointer("mlp")
    for release, match in ((json.dumps(mlp.claim).encode(), "other identity: the signed release beside the plan is "
                                                             "of mlp/rtx-4090/"),
                           (b"{not json", "malformed: the release beside the plan is not JSON"),
                           (json.dumps(sign_release(farm.stranger, unverified_claim(mlp.claim))).encode(),
                            "untrusted key: the release beside the plan")):
        check = signature_check(files(release), farm.trust, sha)
        assert check.ok is False and check.detail.startswith(match), check.detail
    wrong_plan = signature_check(files(claim_bytes), farm.trust, "3" * 64)
    assert wrong_plan.ok is False and wrong_plan.detail.startswith("other bytes")
    checks = static_checks(plan, mine.manifest, expected_model="mlp", installed={"tensorrt_rtx": "1.7.1.116"},
                           files=files(claim_bytes), trust=farm.trust)
    identity = next(c for c in checks if c.name == "identity")
    assert identity.ok is False and "plan is of enc/rtx-4090/" in identity.detail and "expected model mlp" in \
        identity.detail
    assert next(c for c in static_checks(plan, mine.manifest, expected_model="enc", installed={},
                                         files=None) if c.name == "identity").ok is True
    assert not any(c.name == "identity" for c in static_checks(plan, mine.manifest, installed={}))
    sig = next(c for c in static_checks(plan, mine.manifest, installed={}, files=files(claim_bytes), trust=farm.trust)
               if c.name == "signature")
    assert sig.ok is True and sig.detail.startswith("signed by trusted key")
    vc = mine.manifest.model_copy(update={"target": mine.manifest.target.model_copy(update={
        "version_compatible": True})})
    host_code = signature_check(PlanFiles(plan, got.manifest_path, vc, mine.manifest_bytes, mine.signature,
                                          mine.provenance, None), None, sha)
    assert host_code.ok is False and "carries host code" in host_code.detail


def test_damaged_store_objects_are_corrupt_not_bad_input(farm):
    enc, _ = farm.pointer()
    farm.store.delete(enc.manifest)
    farm.store.put_if_absent(enc.manifest, b'{"schema_version": 2, "plan": 5}')
    with pytest.raises(CorruptObject, match="not what trtfarm published there"):
        read_stored(farm.store, enc.manifest)


def test_pull_hashes_the_plan_it_downloads_and_says_what_it_pulled(farm):
    from trtfarm.errors import IntegrityError, UserInputError

    (farm.root / "host").mkdir()  # --to a folder: the plan is named after the model in it
    got = pull_release(farm.store, "enc", "rtx-4090", ["tensorrt_rtx-9.9.9.9", TC], farm.root / "host",
                       trust=farm.trust, accepted=farm.memory)
    assert got.plan == farm.root / "host" / "enc.plan" and got.manifest_path == farm.root / "host" / \
        "enc.plan.manifest.json"
    assert got.pointer_key == layout.release_key("enc", "rtx-4090", TC) and got.bytes == got.plan.stat().st_size
    assert got.release.key.hint == farm.signer.hint
    enc, _ = farm.pointer()
    plan_key = read_stored(farm.store, enc.manifest).manifest.plan.key
    size = len(farm.store.get(plan_key).data)
    farm.store.delete(plan_key)
    farm.store.put_if_absent(plan_key, b"\xff" * size)  # the same size: only the hash tells
    with pytest.raises(IntegrityError):
        farm.pull("other")
    assert not (farm.root / "other" / "enc.plan").exists()
    with pytest.raises(UserInputError, match=r"no released plan of 'enc' for GPU 'rtx-2080'.*Released: rtx-3090 / "):
        pull_release(farm.store, "enc", "rtx-2080", [TC], farm.root / "x")
    with pytest.raises(UserInputError, match="'nope' has no releases in"):
        pull_release(farm.store, "nope", "rtx-4090", [TC], farm.root / "x")


def test_an_unsigned_pull_leaves_no_release_file_beside_the_plan(tmp_path):
    farm = Farm(tmp_path / "u", signed=False)
    (farm.root / "host").mkdir()
    (farm.root / "host" / "enc.plan.release.json").write_text("{}")  # an older pull's
    farm.pull(trust=False, memory=False)
    assert not (farm.root / "host" / "enc.plan.release.json").exists()


def test_a_manifest_of_the_same_identity_from_another_folder_isrefused(farm):
    enc, _ = farm.pointer()
    for other in (farm.keys["enc", "rtx-4090", T0],
                  farm.publish("enc", "rtx-4090", T1, 9, farm.signer, build="profiles changed")):
        copied = read_stored(farm.store, other)
        farm.store.delete(enc.manifest)
        farm.store.put_if_absent(enc.manifest, copied.manifest_bytes)
        farm.put_pointer(enc.model_copy(update={"plan_sha256": copied.manifest.plan.sha256}))
        err = refused("other identity", "it was copied from elsewhere", farm.pull, trust=False)
        assert str(err).startswith("other identity: file://") and "asks for enc/rtx-4090/" in str(err)


def test_sign_goes_on_past_a_release_that_needs_nothing(farm):
    enc, _ = farm.pointer()
    farm.put_pointer(enc.model_copy(update={"claim": None}))
    assert sign_store(farm.store, farm.signer, ["enc"]).releases == [layout.release_key("enc", "rtx-4090", TC)]


def test_the_policy_decides_unless_forced(farm):
    from trtfarm.publishing.release import policy_blocker

    key = farm.keys["enc", "rtx-4090", T1]
    m = read_stored(farm.store, key).manifest
    v = m.verification
    assert policy_blocker(m, "built") is None
    assert "the engine check is pending" in policy_blocker(m, "engine")
    passed = m.model_copy(update={"verification": v.model_copy(update={"engine": v.engine.model_copy(
        update={"status": "passed"})})})
    assert policy_blocker(passed, "engine") is None
    failed = m.model_copy(update={"verification": v.model_copy(update={"engine": v.engine.model_copy(
        update={"status": "failed", "detail": "cosine 0.91"})})})
    assert policy_blocker(failed, "built") == "verification failed (engine): cosine 0.91"
    unbuilt = m.model_copy(update={"verification": v.model_copy(update={"built": v.built.model_copy(
        update={"status": "pending"})})})
    assert policy_blocker(unbuilt, "built") == "the build check is pending"
    other = farm.publish("enc", "rtx-4090", T1, 8, farm.signer, build="another build of the same export")
    with pytest.raises(ReleaseRefused, match="not released: the engine check is pending"):
        move_release(farm.store, other, read_stored(farm.store, other).manifest, release_on="engine", reason="x")
    moved = move_release(farm.store, other, read_stored(farm.store, other).manifest, release_on="engine",
                         reason="x", force=True, signer=farm.signer)  # the same export time: not older
    assert moved.current.action == "forced" and len(moved.history) == 3 and moved.history[-1].reason == "x"
    assert moved.history[-1].exported_at == T1


def test_a_release_host_remembers_versions_and_refuses_an_older_current_pointer(farm):
    key = farm.keys["enc", "rtx-4090", T1]
    m = read_stored(farm.store, key).manifest
    pointer, _ = farm.pointer()
    farm.memory.remember(farm.store.uri, unverified_claim(pointer.claim).model_copy(update={"version": 9}))
    refused("rollback", "is version 2, and this host already accepted version 9", move_release, farm.store,
             farm.keys["enc", "rtx-4090", T0], read_stored(farm.store, farm.keys["enc", "rtx-4090", T0]).manifest,
             release_on="built", reason="x", rollback=True, trust=farm.trust, accepted=farm.memory,
             signer=farm.signer)
    forced = move_release(farm.store, key, m, release_on="built", reason="x", force=True, trust=farm.trust,
                          accepted=farm.memory, signer=farm.signer)
    assert forced.version == 10 and unverified_claim(forced.claim).version == 10
    assert farm.memory.get(farm.store.uri, "enc/rtx-4090/" + TC).version == 10


def test_a_current_pointer_whose_manifest_is_gone_is_replaced_only_under_its_own_name(farm):
    key = farm.keys["enc", "rtx-4090", T1]
    m = read_stored(farm.store, key).manifest
    pointer, _ = farm.pointer()
    farm.put_pointer(pointer.model_copy(update={"manifest": "plans/enc/gone/manifest.json"}))
    moved = move_release(farm.store, key, m, release_on="built", reason="repoint", signer=farm.signer)
    assert moved.manifest == key and moved.version == 3
    mlp, _ = farm.pointer("mlp")
    farm.put_pointer(mlp.model_copy(update={"manifest": "plans/mlp/gone/manifest.json"}))
    refused("other identity", "but the pointer there names mlp/rtx-4090/", move_release, farm.store, key, m,
             release_on="built", reason="x")


def test_release_judges_the_manifest_the_store_holds_not_the_one_it_was_handed(farm):
    key = farm.keys["enc", "rtx-4090", T0]
    mine = read_stored(farm.store, key).manifest
    farm.store.delete(key)
    farm.store.put_if_absent(key, read_stored(farm.store, farm.keys["mlp", "rtx-4090", T1]).manifest_bytes)
    refused("other identity", "is of mlp", move_release, farm.store, key, mine, release_on="built", reason="x",
             rollback=True)


def test_the_publish_protocol_is_idempotent_adopts_and_repairs(farm):
    from trtfarm.errors import StoreError

    key = farm.keys["enc", "rtx-4090", T1]
    stored = read_stored(farm.store, key)
    prefix = layout.folder_of(key)
    plan = farm.root / "again.plan"
    plan.write_bytes(farm.store.get(stored.manifest.plan.key).data)
    attest = Attestation(lambda man, sha: json.dumps({"subject": man.plan.sha256}).encode(), farm.signer)
    same = publish_plan(farm.store, prefix, plan, lambda info: stored.manifest.model_copy(update={"plan": info}),
                        attest=attest)
    assert (same.manifest_key, same.created, same.manifest) == (key, False, stored.manifest)
    other_build = stored.manifest.model_copy(update={"build": stored.manifest.build.model_copy(update={
        "build_digest": "f" * 64})})
    farm.store.delete(stored.manifest.plan.key)  # the plan goes up again, the manifest there is another build's
    with pytest.raises(StoreError, match="holds a different build"):
        publish_plan(farm.store, prefix, plan, lambda info: other_build.model_copy(update={"plan": info}),
                     attest=attest, absent=True)
    assert {k.rsplit("/", 1)[1] for k in farm.store.list(f"{prefix}/")} == {
        "model.plan", "manifest.json", layout.provenance_name(stored.manifest_sha256),
        layout.signature_name(stored.manifest_sha256)}  # the loser's attestations are gone
    # a damaged plan object (another size): the folder is withdrawn and published afresh, signed again
    farm.store.delete(stored.manifest.plan.key)
    farm.store.put_if_absent(stored.manifest.plan.key, b"short")
    fresh = publish_plan(farm.store, prefix, plan, lambda info: stored.manifest.model_copy(update={"plan": info}),
                         attest=attest)
    assert fresh.created and read_stored(farm.store, key).verdict(farm.trust).ok is True
    # a plan left without its manifest (a worker died between the steps) is adopted with its own digest
    farm.store.delete(key)
    mine = farm.root / "mine.plan"
    mine.write_bytes(b"another worker's bytes of the same build")
    adopted = publish_plan(farm.store, prefix, mine, lambda info: stored.manifest.model_copy(update={"plan": info}),
                           attest=attest)
    assert adopted.created and adopted.manifest.plan.sha256 == stored.manifest.plan.sha256
    assert adopted.manifest.plan.bytes == stored.manifest.plan.bytes


def test_a_publisher_that_loses_the_race_leaves_only_the_winners_attestations(farm):
    key = farm.keys["mlp", "rtx-4090", T1]
    stored = read_stored(farm.store, key)
    plan = farm.root / "race.plan"
    plan.write_bytes(farm.store.get(stored.manifest.plan.key).data)
    prefix = "plans/mlp/race/rtx-4090/" + TC + "/x"
    attest = Attestation(lambda man, sha: json.dumps({"by": man.build.worker_host}).encode(), farm.signer)
    inner = []

    def loser(info):
        inner.append(publish_plan(farm.store, prefix, plan, lambda i: stored.manifest.model_copy(update={
            "plan": i, "build": stored.manifest.build.model_copy(update={"worker_host": "winner"})}),
            attest=attest, absent=True))
        return stored.manifest.model_copy(update={"plan": info, "build": stored.manifest.build.model_copy(
            update={"worker_host": "loser"})})

    lost = publish_plan(farm.store, prefix, plan, loser, attest=attest, absent=True)
    assert inner[0].created and not lost.created and lost.manifest.build.worker_host == "winner"
    won = read_stored(farm.store, layout.manifest_key(prefix))
    names = {k.rsplit("/", 1)[1] for k in farm.store.list(f"{prefix}/")}
    assert names == {"model.plan", "manifest.json", layout.provenance_name(won.manifest_sha256),
                     layout.signature_name(won.manifest_sha256)}
    # the same bytes from both: the pair is shared and stays
    twin = "plans/mlp/twin/rtx-4090/" + TC + "/x"
    publish_plan(farm.store, twin, plan, lambda info: (publish_plan(farm.store, twin, plan, lambda i: stored.manifest
                 .model_copy(update={"plan": i}), attest=attest, absent=True), stored.manifest.model_copy(update={
                     "plan": info}))[1], attest=attest, absent=True)
    assert read_stored(farm.store, layout.manifest_key(twin)).verdict(farm.trust).ok is True


@pytest.mark.parametrize(("days", "refreshed"), [(9, True), (11, False)])
def test_sign_refreshes_by_default_a_claim_that_expires_within_ten_days(farm, days, refreshed):
    key = layout.release_key("enc", "rtx-4090", TC)
    short = refresh_release(farm.store, key, farm.signer, reason="short claim", expiry=timedelta(days=days))
    done = sign_store(farm.store, farm.signer)
    assert (key in done.releases) is refreshed and done.refused == []
    got = farm.pull()
    assert got.release.claim.version == short.version + refreshed
    assert (got.release.claim.expires() - datetime.now(timezone.utc) > timedelta(days=29)) is refreshed
