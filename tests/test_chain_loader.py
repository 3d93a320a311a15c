"""The loader's refusals in process: every check of ``verify`` and ``load_plan`` on made-up plan bytes, really signed.

A plan here is a TensorRT-RTX 1.7.1.116 header and made-up bytes (tests/chain_farm.py): what the loader checks
before the runtime sees a plan. Each case breaks one thing and the whole list of checks is compared, so a check that
stops refusing, refuses the right plan, or names the wrong cause fails here. The runtime itself gets the made-up
bytes last and refuses them (as it would anywhere: they are no engine); tests/runtime/test_loader.py does the same
with real plans.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from trtfarm import layout
from trtfarm.errors import UserInputError
from trtfarm.machine.gpu import GpuScan, LocalGpu
from trtfarm.publishing.attest import read_stored
from trtfarm.runtime.loader import (
    FIX,
    PlanMismatch,
    RuntimeRefused,
    UntrustedPlan,
    VerifyCheck,
    contexts_that_fit,
    load_plan,
    runtime_check,
    signature_check,
    static_checks,
)
from trtfarm.runtime.plan_files import (
    find_files,
    find_pair,
    manifest_beside,
    provenance_beside,
    release_beside,
    signature_beside,
)
from trtfarm.signing.release_claim import sign_release, unverified_claim
from trtfarm.vocabulary.manifest import manifest_from_json

from .chain_farm import TC, TEMPLATE, Farm, make_key, rtx_header

RTX = {"tensorrt_rtx": "1.7.1.116", "tensorrt": None}
RTX4090 = GpuScan((LocalGpu(0, "NVIDIA GeForce RTX 4090", "8.9", 24.0),), "580.0")
ONNX = "a" * 64


def gpus(*specs: tuple[str, str]) -> GpuScan:
    return GpuScan(tuple(LocalGpu(i, name, cc, 24.0) for i, (name, cc) in enumerate(specs)), "580.0")


def local_plan(folder: Path, data: bytes | None = None, **target) -> tuple[Path, object]:
    """A plan file and its manifest (the template's, naming these bytes); ``target`` changes the manifest's target."""
    data = rtx_header() + bytes(500) if data is None else data
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "enc.plan"
    plan.write_bytes(data)
    t = manifest_from_json(TEMPLATE.read_bytes())
    m = t.model_copy(update={
        "model": t.model.model_copy(update={"name": "enc", "onnx_digest": ONNX}),
        "target": t.target.model_copy(update=target),
        "plan": t.plan.model_copy(update={"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})})
    manifest_beside(plan).write_bytes(m.to_json())
    return plan, m


def rows(checks: list[VerifyCheck]) -> list[tuple]:
    return [(c.name, c.ok, c.detail) for c in checks]


def good_rows(m) -> list[tuple]:
    sha = m.plan.sha256
    return [("sha256", True, f"plan sha256 {sha[:16]}…, manifest says {sha[:16]}…"),
            ("header", True, "header: tensorrt_rtx 1.7.1.116"),
            ("identity", True, f"plan is of enc/rtx-4090/{TC}, expected model enc"),
            ("model", True, f"plan is of enc onnx {ONNX[:12]}, expected onnx {ONNX[:12]}"),
            ("toolchain", True, "plan needs tensorrt_rtx 1.7.1.116; installed: 1.7.1.116"),
            ("gpu", True, "plan is for NVIDIA GeForce RTX 4090 (cc 8.9, class rtx-portable); this host has NVIDIA "
                          "GeForce RTX 4090 (cc 8.9): class rtx-portable serves compute capability 8.9")]


def checked(plan, m, **kw) -> list[tuple]:
    args = {"expected_onnx_digest": ONNX, "expected_model": "enc", "installed": RTX, "gpus": RTX4090, **kw}
    return rows(static_checks(plan, m, **args))


def test_the_right_plan_passes_every_check_and_says_what_it_compared(tmp_path):
    plan, m = local_plan(tmp_path)
    assert checked(plan, m) == good_rows(m)
    assert [r[0] for r in rows(static_checks(plan, m, installed=RTX, gpus=RTX4090))] == [
        "sha256", "header", "toolchain", "gpu"]  # nothing expected, nothing compared


HEADERS = {  # plan bytes -> what the header check says
    "another version": (rtx_header((1, 9, 1, 116)), "header says tensorrt_rtx 1.9.1.116, the manifest says "
                                                    "tensorrt_rtx 1.7.1.116"),
    "another build": (rtx_header((1, 7, 1, 117)), "header says tensorrt_rtx 1.7.1.117, the manifest says "
                                                  "tensorrt_rtx 1.7.1.116"),
    "another flavour": (rtx_header(magic=b"ftrt"), "header says tensorrt 1.7.1.116, the manifest says tensorrt_rtx "
                                                   "1.7.1.116"),
    "bad magic": (rtx_header(magic=b"xxxx"), "header: not a TensorRT-family plan (bad magic)"),
}


@pytest.mark.parametrize("data", [b"vtrt" + bytes(23), b""])
def test_a_plan_shorter_than_a_header_has_none(tmp_path, data):
    plan, m = local_plan(tmp_path, data)
    want = good_rows(m)
    want[1] = ("header", False, "header: not a TensorRT-family plan (bad magic)")
    assert checked(plan, m) == want


@pytest.mark.parametrize("case", sorted(HEADERS))
def test_a_header_of_another_toolchain_or_none_fails_the_header_check_alone(tmp_path, case):
    head, detail = HEADERS[case]
    plan, m = local_plan(tmp_path, head + bytes(300))
    want = good_rows(m)
    want[1] = ("header", False, detail)
    assert checked(plan, m) == want


def test_a_version_the_manifest_gives_without_its_build_number_matches(tmp_path):
    plan, m = local_plan(tmp_path, toolchain_version="1.7.1")
    got = checked(plan, m, expected_model=None, expected_onnx_digest=None)
    assert got[1] == ("header", True, "header: tensorrt_rtx 1.7.1.116") and got[2][1] is True


def test_damaged_bytes_fail_the_sha256_check_and_name_both_digests(tmp_path):
    plan, m = local_plan(tmp_path)
    data = bytearray(plan.read_bytes())
    data[100] ^= 1
    plan.write_bytes(bytes(data))
    now = hashlib.sha256(bytes(data)).hexdigest()
    want = good_rows(m)
    want[0] = ("sha256", False, f"plan sha256 {now[:16]}…, manifest says {m.plan.sha256[:16]}… (the file is damaged "
                                "or not this manifest's plan)")
    assert checked(plan, m) == want


EXPECTATIONS = {  # what the caller expects -> the check that fails, and its words
    "another model": ({"expected_model": "mlp"}, 2, ("identity", False, f"plan is of enc/rtx-4090/{TC}, expected "
                                                                       "model mlp")),
    "another export": ({"expected_onnx_digest": "b" * 64}, 3, ("model", False, f"plan is of enc onnx {ONNX[:12]}, "
                                                                              f"expected onnx {'b' * 12}")),
    "another toolchain installed": ({"installed": {"tensorrt_rtx": "1.6.0.5"}}, 4, (
        "toolchain", False, "plan needs tensorrt_rtx 1.7.1.116; installed: 1.6.0.5")),
    "no toolchain installed": ({"installed": {}}, 4, ("toolchain", False, "plan needs tensorrt_rtx 1.7.1.116; "
                                                                          "installed: not importable")),
    "only the other flavour": ({"installed": {"tensorrt": "1.7.1.116"}}, 4, (
        "toolchain", False, "plan needs tensorrt_rtx 1.7.1.116; installed: not importable")),
    "another GPU": ({"gpus": gpus(("NVIDIA H100 80GB HBM3", "9.0"))}, 5, (
        "gpu", False, "plan is for NVIDIA GeForce RTX 4090 (cc 8.9, class rtx-portable); this host has NVIDIA H100 "
                      "80GB HBM3 (cc 9.0): class rtx-portable does not serve compute capability 9.0")),
    "no GPU": ({"gpus": GpuScan((), None, "NVML unavailable: no driver")}, 5, (
        "gpu", False, "plan is for NVIDIA GeForce RTX 4090 (cc 8.9, class rtx-portable); this host has no NVIDIA "
                      "GPU (NVML unavailable: no driver)")),
}


@pytest.mark.parametrize("case", sorted(EXPECTATIONS))
def test_a_plan_for_another_model_toolchain_or_gpu_fails_that_check_alone(tmp_path, case):
    kw, index, row = EXPECTATIONS[case]
    plan, m = local_plan(tmp_path)
    want = good_rows(m)
    want[index] = row
    assert checked(plan, m, **kw) == want


def test_the_installed_toolchain_is_asked_when_the_caller_does_not_say(tmp_path):
    plan, m = local_plan(tmp_path)
    assert checked(plan, m, installed=None)[4] == ("toolchain", True, "plan needs tensorrt_rtx 1.7.1.116; installed: "
                                                                      "1.7.1.116")  # tensorrt-rtx is installed here


FITS = [  # compatibility class, (GPU name, compute capability) on the host, whether the plan runs there
    ("rtx-portable", ("NVIDIA GeForce RTX 3090", "8.6"), True),
    ("rtx-portable", ("NVIDIA RTX PRO 6000", "12.0"), True),
    ("rtx-portable", ("NVIDIA GeForce RTX 5090", "12.9"), True),
    ("rtx-portable", ("Tesla T4", "7.5"), False),
    ("rtx-portable", ("NVIDIA H100 80GB HBM3", "9.0"), False),
    ("sm89", ("NVIDIA L4", "8.9"), True),
    ("sm89", ("NVIDIA GeForce RTX 3090", "8.6"), False),
    ("ampere-plus", ("NVIDIA A100-SXM4-80GB", "8.0"), True),
    ("ampere-plus", ("NVIDIA H100 80GB HBM3", "9.0"), True),
    ("ampere-plus", ("Tesla T4", "7.5"), False),
    ("rtx-4090", ("NVIDIA GeForce RTX 4090", "8.9"), True),
    ("rtx-4090", ("NVIDIA GeForce RTX 4090 D", "8.9"), False),
    ("rtx-4090", ("NVIDIA GeForce RTX 4090", "9.0"), False),
]


@pytest.mark.parametrize("cls, gpu, fits", FITS)
def test_a_plan_runs_on_the_gpus_of_its_compatibility_class(tmp_path, cls, gpu, fits):
    plan, m = local_plan(tmp_path, compat_class=cls)
    assert checked(plan, m, gpus=gpus(gpu))[5][1] is fits
    assert checked(plan, m, gpus=gpus(("Tesla T4", "7.5"), gpu))[5][1] is fits  # any one GPU of the host will do


# --- the signature and the release beside a pulled plan ---

@pytest.fixture
def farm(tmp_path):
    return Farm(tmp_path / "farm")


def test_pull_writes_each_attestation_beside_the_plan_under_its_own_name(farm):
    got = farm.pull()
    stored = read_stored(farm.store, got.release.claim.manifest)
    assert [p.name for p in (manifest_beside(got.plan), signature_beside(got.plan), provenance_beside(got.plan),
                             release_beside(got.plan))] == ["enc.plan.manifest.json", "enc.plan.sigstore.json",
                                                            "enc.plan.provenance.json", "enc.plan.release.json"]
    files = find_files(got.plan)
    assert (files.plan, files.manifest_path, files.manifest_bytes) == (got.plan, got.manifest_path,
                                                                       stored.manifest_bytes)
    assert (files.signature, files.provenance) == (stored.signature, stored.provenance)
    assert unverified_claim(json.loads(files.release)) == got.release.claim
    assert find_pair(got.plan) == (got.plan, stored.manifest)
    assert find_files(got.manifest_path).plan == got.plan  # the manifest's path finds its plan


def test_a_store_folder_is_read_by_the_names_the_store_gives_its_attestations(farm):
    key = farm.keys["enc", "rtx-4090", "2026-02-01T00:00:00+00:00"]
    stored = read_stored(farm.store, key)
    folder = Path(farm.store.uri.removeprefix("file://")) / layout.folder_of(key)
    for ref in (folder / "manifest.json", folder / "model.plan"):
        files = find_files(ref)
        assert (files.plan, files.manifest_path) == (folder / "model.plan", folder / "manifest.json")
        assert (files.signature, files.provenance, files.release) == (stored.signature, stored.provenance, None)
        assert signature_check(files, farm.trust, stored.manifest.plan.sha256).ok is True


def test_files_that_are_not_there_are_named_with_the_fix(tmp_path):
    plan, m = local_plan(tmp_path)
    (tmp_path / "other.plan").write_bytes(b"plan bytes")  # a plan with nothing beside it
    for ref, match in ((tmp_path / "nope.json", "nope.json: no such file"),
                       (tmp_path / "other.plan", r"other.plan: no manifest beside it \(other.plan.manifest.json or "
                                                 r"manifest.json\); `trtfarm pull` writes one")):
        with pytest.raises(UserInputError, match=match):
            find_files(ref)
    plan.unlink()
    with pytest.raises(UserInputError, match="/enc.plan: the plan named by the manifest is not there"):
        find_files(manifest_beside(plan))  # pull's name for it, not the store's
    manifest_beside(plan).rename(tmp_path / "manifest.json")
    with pytest.raises(UserInputError, match="/model.plan: the plan named by the manifest is not there"):
        find_files(tmp_path / "manifest.json")  # a store folder's
    (tmp_path / "manifest.json").rename(manifest_beside(plan))
    manifest_beside(plan).write_text("{not json")
    with pytest.raises(UserInputError, match="not a trtfarm manifest"):
        find_files(manifest_beside(plan))


def _pulled_files(farm, to="host"):
    got = farm.pull(to, trust=False, memory=False)
    return got, find_files(got.plan)


def test_the_signature_check_against_trusted_keys_unsigned_and_other_keys(farm, tmp_path):
    got, files = _pulled_files(farm)
    sha = files.manifest.plan.sha256
    ok = signature_check(files, farm.trust, sha)
    assert (ok.name, ok.ok) == ("signature", True) and ok.detail.startswith("signed by trusted key")
    plain = signature_check(files, None, sha)
    assert plain.ok is None and plain.detail.startswith("unsigned-checked")
    _, stranger_trust = make_key(tmp_path, "other")
    other = signature_check(files, stranger_trust, sha)
    assert other.ok is False and other.detail.startswith("untrusted key")
    unsigned = Farm(tmp_path / "unsigned", signed=False)
    _, bare = _pulled_files(unsigned)
    refused = signature_check(bare, unsigned.trust, bare.manifest.plan.sha256)
    assert refused.ok is False and refused.detail.startswith("unsigned") and "trtfarm sign" in refused.detail


def test_a_release_beside_the_plan_must_name_this_identity_and_these_manifest_bytes(farm):
    got, files = _pulled_files(farm)
    sha = files.manifest.plan.sha256
    claim = unverified_claim(json.loads(release_beside(got.plan).read_bytes()))
    older = read_stored(farm.store, farm.keys["enc", "rtx-4090", "2026-01-01T00:00:00+00:00"])
    for change in ({"manifest_sha256": older.manifest_sha256},  # this identity, another manifest
                   {"model": "mlp"}):  # another identity, these very bytes
        forged = json.dumps(sign_release(farm.signer, claim.model_copy(update=change))).encode()
        check = signature_check(files.__class__(**{**files.__dict__, "release": forged}), farm.trust, sha)
        assert check.ok is False and check.detail.startswith("other identity: the signed release beside the plan is "
                                                             "of "), check.detail
        mine = hashlib.sha256(files.manifest_bytes).hexdigest()
        named = change.get("manifest_sha256", mine)
        assert check.detail.endswith(f"(manifest sha256 {named[:16]}), the manifest is of enc/rtx-4090/{TC} (sha256 "
                                     f"{mine[:16]})"), check.detail


def test_a_refused_signature_is_the_reason_given_even_with_a_bad_release_beside(farm, tmp_path):
    got, files = _pulled_files(farm)
    _, other_trust = make_key(tmp_path, "other")
    bad = files.__class__(**{**files.__dict__, "release": b"{not json"})
    check = signature_check(bad, other_trust, files.manifest.plan.sha256)
    assert check.ok is False and check.detail.startswith("untrusted key") and "release" not in check.detail


# --- load_plan: what it raises, in what words, and where the trusted keys come from ---

def test_load_plan_refuses_a_mismatch_listing_each_difference_with_the_fix(tmp_path):
    plan, m = local_plan(tmp_path)
    with pytest.raises(PlanMismatch) as err:
        load_plan(plan, installed={"tensorrt_rtx": "1.6.0.5"}, gpus=gpus(("Tesla T4", "7.5")))
    assert type(err.value) is PlanMismatch
    assert str(err.value) == (f"{plan}: refusing to load it:\n  - plan needs tensorrt_rtx 1.7.1.116; installed: "
                              "1.6.0.5\n  - plan is for NVIDIA GeForce RTX 4090 (cc 8.9, class rtx-portable); this "
                              "host has Tesla T4 (cc 7.5): class rtx-portable does not serve compute capability 7.5"
                              f"\n{FIX}")
    assert err.value.differences == ["plan needs tensorrt_rtx 1.7.1.116; installed: 1.6.0.5", "plan is for NVIDIA "
                                     "GeForce RTX 4090 (cc 8.9, class rtx-portable); this host has Tesla T4 (cc 7.5): "
                                     "class rtx-portable does not serve compute capability 7.5"]
    assert err.value.exit_code == 2


def test_load_plan_refuses_another_model_and_a_bad_signature_as_untrusted_in_one_line(farm, tmp_path, monkeypatch):
    got = farm.pull()
    monkeypatch.delenv("TRTFARM_TRUSTED_KEYS", raising=False)
    with pytest.raises(UntrustedPlan) as err:
        load_plan(got.plan, expected_model="mlp", installed=RTX, gpus=RTX4090, trust=farm.trust)
    assert str(err.value) == f"{got.plan}: refusing to load it: plan is of enc/rtx-4090/{TC}, expected model mlp"
    assert err.value.differences == [f"plan is of enc/rtx-4090/{TC}, expected model mlp"]
    _, other = make_key(tmp_path, "other")
    with pytest.raises(UntrustedPlan, match=r"refusing to load it: plan is for .* \(cc 7.5\): class rtx-portable "
                       r"does not serve compute capability 7.5; untrusted key: ") as err:
        load_plan(got.plan, installed=RTX, gpus=gpus(("Tesla T4", "7.5")), trust=other)
    assert "\n" not in str(err.value) and len(err.value.differences) == 2
    monkeypatch.setenv("TRTFARM_TRUSTED_KEYS", str(tmp_path / "other.pub"))  # the configured keys, when none given
    with pytest.raises(UntrustedPlan, match="untrusted key"):
        load_plan(got.plan, installed=RTX, gpus=RTX4090)
    with pytest.raises(PlanMismatch, match="runtime.s header check refused it") as err:  # the given keys win
        load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=farm.trust)
    assert type(err.value) is RuntimeRefused  # not untrusted: every check passed, the runtime said no


def test_when_every_check_passes_the_runtime_gets_the_plan_and_refuses_bytes_that_are_no_engine(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.delenv("TRTFARM_TRUSTED_KEYS", raising=False)
    plan, m = local_plan(tmp_path)
    with pytest.raises(PlanMismatch) as err:
        load_plan(plan, expected_onnx_digest=ONNX, expected_model="enc", installed=RTX, gpus=RTX4090)
    assert type(err.value) is RuntimeRefused and len(err.value.differences) == 1
    # the runtime's header-only check answers first (with no GPU here: INVALID), so nothing is deserialised
    assert err.value.differences[0].startswith("the tensorrt_rtx runtime's header check refused it, so it was not "
                                               "deserialised: get_engine_validity: INVALID")
    check = runtime_check(plan, m)
    assert check.name == "runtime" and check.ok is False and check.detail.startswith("get_engine_validity: INVALID")
    assert check.detail.endswith("; not deserialised") and "deserialize_cuda_engine" not in check.detail


def test_a_version_compatible_plan_is_never_loaded_without_a_trusted_signature(tmp_path, monkeypatch):
    monkeypatch.delenv("TRTFARM_TRUSTED_KEYS", raising=False)
    plan, m = local_plan(tmp_path, version_compatible=True)
    with pytest.raises(UntrustedPlan, match="carries host code"):
        load_plan(plan, installed=RTX, gpus=RTX4090)


def test_contexts_fill_the_memory_by_traffic_after_one_per_profile():
    assert contexts_that_fit(10_000, [1000, 4000], [0.9, 0.1], reserve_fraction=0.0) == [5, 1]
    assert contexts_that_fit(10_000, [1000, 1000]) == [4, 4]  # 10% kept back, shares even by default
    assert contexts_that_fit(2_000, [1000, 1000], reserve_fraction=0.0) == [1, 1]
    with pytest.raises(UserInputError, match="one context per profile needs 2,000 bytes; only 1,800 are available"):
        contexts_that_fit(2_000, [1000, 1000])
    assert contexts_that_fit(1_000, [0, 0], reserve_fraction=0.0) == [501, 501]  # a profile needing nothing


# --- load_plan(report=True): the load receipt, written after the refusal (no GPU here runs a plan) ---

def test_a_refused_load_records_a_failed_receipt_and_a_receipt_that_cannot_be_written_only_warns(farm, tmp_path,
                                                                                                monkeypatch):
    from trtfarm.releases.moves import move_release
    from trtfarm.releases.receipts import list_receipts

    for name in ("TRTFARM_TRUSTED_KEYS", "TRTFARM_SIGNING_KEY", "TRTFARM_TARGETS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    got = farm.pull()
    sha = read_stored(farm.store, farm.keys["enc", "rtx-4090", "2026-02-01T00:00:00+00:00"]).manifest.plan.sha256
    with pytest.raises(UserInputError, match=r"report=True\) needs store="):
        load_plan(got.plan, report=True)
    # another GPU: this host's own mismatch says nothing of the plan, so no receipt (and no rollback for the fleet)
    with pytest.warns(UserWarning, match="load receipt not recorded: this host refused the plan before the runtime"), \
            pytest.raises(PlanMismatch) as wrong_gpu:
        load_plan(got.plan, installed=RTX, gpus=gpus(("Tesla T4", "7.5")), trust=farm.trust, report=True,
                  store=farm.store.uri)
    assert not isinstance(wrong_gpu.value, RuntimeRefused)
    assert list_receipts(farm.store, "enc", "rtx-4090", TC, "stable", sha) == []
    with pytest.warns(UserWarning, match="stable kept"), pytest.raises(RuntimeRefused) as runtime:
        load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=farm.trust, report=True, store=farm.store)
    receipts = list_receipts(farm.store, "enc", "rtx-4090", TC, "stable", sha)
    assert [(r.ok, r.error, r.load_ms) for r in receipts] == [(False, "; ".join(runtime.value.differences), None)]
    assert "header check refused it" in receipts[0].error  # every check passed: the runtime had the last word
    t0 = farm.keys["enc", "rtx-4090", "2026-01-01T00:00:00+00:00"]
    move_release(farm.store, t0, read_stored(farm.store, t0).manifest, release_on="built", reason="back",
                 rollback=True, signer=farm.signer)  # the pulled plan is no longer what stable serves
    before = farm.pointer()[0]
    with pytest.warns(UserWarning, match=r"stable serves another plan now; the channel no longer serves that plan"), \
            pytest.raises(RuntimeRefused):  # recorded (stable served it), and nothing moves
        load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=farm.trust, report=True, store=farm.store)
    assert len(list_receipts(farm.store, "enc", "rtx-4090", TC, "stable", sha)) == 2
    assert farm.pointer()[0] == before


def test_load_plan_serves_one_channel_and_refuses_a_rollback_this_host_remembers(farm, tmp_path, monkeypatch):
    from trtfarm.signing.accepted import AcceptedReleases

    monkeypatch.delenv("TRTFARM_TRUSTED_KEYS", raising=False)
    got = farm.pull()
    claim = unverified_claim(json.loads(release_beside(got.plan).read_bytes()))
    with pytest.raises(UserInputError, match="'canary' is not a channel"):
        load_plan(got.plan, channel="canary")
    for trust in (farm.trust, None):  # a candidate host serves stable: it gets past every check to the runtime
        with pytest.raises(PlanMismatch, match="runtime's header check"):
            load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=trust, channel="candidate")
    release_beside(got.plan).write_text(json.dumps(sign_release(farm.signer, claim.model_copy(update={
        "channel": "candidate"}))))
    for trust in (farm.trust, None):  # without keys the claim's channel is read unverified
        with pytest.raises(UntrustedPlan, match="other channel: the signed release beside the plan is of the "
                           "candidate channel of enc/rtx-4090/.*, and this host serves stable; `trtfarm pull enc "
                           "--channel stable`"):
            load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=trust)
    release_beside(got.plan).write_text(json.dumps(sign_release(farm.signer, claim.model_copy(update={
        "version": 1}))))
    memory = AcceptedReleases(farm.root / "accepted.json")
    with pytest.raises(UntrustedPlan, match="rollback: the release beside the plan: the release of .* is version 1"):
        load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=farm.trust, store=farm.store, accepted=memory)
    with pytest.raises(PlanMismatch, match="runtime's header check"):  # a host with no memory of version 2
        load_plan(got.plan, installed=RTX, gpus=RTX4090, trust=farm.trust, store=farm.store,
                  accepted=AcceptedReleases(tmp_path / "new.json"))
