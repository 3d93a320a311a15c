"""The store layout is a file format: every key is pinned here, and names that could leave their folder are refused."""

from __future__ import annotations

import pytest

from trtfarm import layout, layout_shared
from trtfarm.errors import UserInputError

D64, B64 = "0123456789ab" + "c" * 52, "fedcba987654" + "0" * 52


def test_every_key_has_the_documented_shape():
    prefix = layout.plan_prefix("encoder", D64, "h100", "tensorrt-11.4.0.106", B64)
    assert prefix == "plans/encoder/0123456789ab/h100/tensorrt-11.4.0.106/fedcba987654"
    assert layout.plan_key(prefix) == f"{prefix}/model.plan"
    assert layout.manifest_key(prefix) == f"{prefix}/manifest.json"
    assert layout.provenance_key(prefix, "ab" * 32) == f"{prefix}/provenance-abababababababab.json"
    assert layout.signature_key(prefix, "ab" * 32) == f"{prefix}/signature-abababababababab.sigstore.json"
    assert layout.folder_of(layout.signature_key(prefix, "ab" * 32)) == prefix
    assert layout.is_attestation("provenance-abababababababab.json") and not layout.is_attestation("model.plan")
    assert layout.plans_prefix() == "plans/" and layout.plans_prefix("encoder") == "plans/encoder/"
    assert layout.release_key("encoder", "h100", "tensorrt-11.4.0.106") == \
        "releases/encoder/h100/tensorrt-11.4.0.106.json"
    assert layout.releases_prefix("encoder") == "releases/encoder/"
    assert layout_shared.timing_cache_key("tensorrt", "11.4.0.106", "h100", "9.0", B64) == \
        "timing-caches/tensorrt-11.4.0.106/h100-sm90/fedcba987654.cache"
    assert layout.converted_prefix("encoder", D64, B64) == "converted/encoder/0123456789ab/fedcba987654"
    assert layout.export_prefix("encoder", "20261201T000000000000Z-0123456789ab") == \
        "models/encoder/20261201T000000000000Z-0123456789ab"
    assert layout.report_key("encoder", "local-20261201T000000-abcdef", "outcomes.json") == \
        "reports/encoder/local-20261201T000000-abcdef/outcomes.json"
    assert layout_shared.job_result_key("6f1c2d3e-0000-4000-8000-000000000000", "fedcba9876540000-1") == \
        "runs/6f1c2d3e-0000-4000-8000-000000000000/jobs/fedcba9876540000-1.json"
    assert layout_shared.webhook_claim_key("ab" * 32) == f"webhook/exports/{'ab' * 32}.json"
    assert layout_shared.status_page_key() == "status/status.html"
    assert layout_shared.state_index_key(7) == "state-index/07.json" and layout_shared.state_index_prefix() == \
        "state-index/"
    assert layout_shared.timing_caches_prefix() == "timing-caches/" and layout.receipts_prefix() == "receipts/"
    assert layout.toolchain_label("tensorrt_rtx", "1.7.1.116") == "tensorrt_rtx-1.7.1.116"


def test_a_plan_key_parses_back_into_its_fields():
    key = layout.manifest_key(layout.plan_prefix("encoder", D64, "h100", "tensorrt-11.4.0.106", B64))
    assert layout.parse_plan_key(key) == ("encoder", "0123456789ab", "h100", "tensorrt-11.4.0.106", "fedcba987654",
                                          "manifest.json")
    assert layout.parse_plan_key("releases/encoder/h100/x.json") is None


def test_converted_registry_and_report_keys_have_their_shape_and_parse_back():
    step = layout.converted_prefix("encoder", D64, B64)
    assert layout.converted_model_key(step) == f"{step}/model.onnx"
    assert layout.converted_report_key(step) == f"{step}/report.json"
    export = layout.export_prefix("encoder", "20261201T000000000000Z-0123456789ab")
    assert layout.export_file_key(export, "data/weights.bin") == f"{export}/data/weights.bin"
    assert layout.exports_prefix() == "models/" and layout.exports_prefix("encoder") == "models/encoder/"
    assert layout.parse_export_record_key(f"{export}/export.json") == ("encoder", "20261201T000000000000Z-0123456789ab")
    assert layout.parse_export_record_key(f"{export}/model.onnx") is None
    assert layout.parse_export_record_key(f"{export}/sub/export.json") is None  # a file of the export, not its record
    key = layout.report_key("encoder", "run-1", "outcomes.json")
    assert layout.parse_report_key(key) == ("encoder", "run-1", "outcomes.json")
    assert layout.parse_report_key("reports/encoder/run-1") is None and layout.parse_report_key("plans/a/b/c") is None
    assert layout.reports_prefix("encoder") == "reports/encoder/" and layout.converted_models_prefix() == "converted/"
    assert layout.parse_state_key(layout.state_key("encoder")) == "encoder" == layout.state_key("encoder")[6:-5]
    assert layout.parse_state_key("state/a/b.json") is None and layout.parse_state_key("state/.json") is None
    assert layout.parse_state_key(layout_shared.state_index_key(0)) is None


def test_timing_cache_references_round_trip():
    key = layout_shared.timing_cache_ref("tensorrt-11.4.0.106/h100-sm90/fedcba987654")
    assert key == layout_shared.timing_cache_key("tensorrt", "11.4.0.106", "h100", "9.0", B64) == \
        layout_shared.timing_cache_ref(key)
    assert layout_shared.timing_cache_label(key) == "tensorrt-11.4.0.106/h100-sm90/fedcba987654"
    assert layout_shared.timing_cache_flavour(key) == "tensorrt"
    assert layout_shared.timing_cache_ref("tensorrt-11.4.0.106/h100") == "timing-caches/tensorrt-11.4.0.106/h100.cache"


@pytest.mark.parametrize("version, cc, flags", [("11.4", "9.0", B64), ("11.4.0", "9.0", B64),
                                                ("11.4.0.106", "sm90", B64), ("11.4.0.106", "9.0", "not-hex"),
                                                ("11.4.0.106", "9.0", "abc")])
def test_a_timing_cache_key_needs_the_exact_build_the_capability_and_a_flags_digest(version, cc, flags):
    with pytest.raises(UserInputError, match="timing cache"):
        layout_shared.timing_cache_key("tensorrt", version, "h100", cc, flags)


@pytest.mark.parametrize("bad", ["tensorrt-11.4.0.106", "a/b/c/d", "tensorrt-11.4.0.106/../x", "../h100"])
def test_a_timing_cache_reference_that_could_leave_its_folder_is_refused(bad):
    with pytest.raises(UserInputError):
        layout_shared.timing_cache_ref(bad)


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "-lead", "x" * 129, "a b", "a\\b", "%2e%2e"])
def test_names_that_could_leave_their_folder_are_user_errors(bad):
    with pytest.raises(UserInputError, match="not a valid name"):
        layout.plan_prefix(bad, D64, "h100", "t-1", B64)
    with pytest.raises(UserInputError):
        layout.release_key("encoder", bad, "t-1")


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ""])
def test_other_segments_refuse_traversal_too(bad):
    with pytest.raises(UserInputError):
        layout_shared.job_result_key(bad, "job")
    with pytest.raises(UserInputError):
        layout.report_key("encoder", bad, "report.md")


NAMES = ["encoder", "e", "BERT-base_v2.1", "m" * 128, "0.9"]  # every name check_name accepts, short and long
GPUS = ["h100", "rtx-4090", "A10G", "l4_24gb"]
TOOLCHAINS = ["tensorrt-11.4.0.106", "tensorrt_rtx-1.7.1.116", "tensorrt-11.4@cu13+x"]


@pytest.mark.parametrize("model", NAMES)
def test_every_key_that_is_parsed_parses_back_into_what_built_it(model):
    """Build -> parse is the identity for each key a module outside layout.py reads fields out of."""
    for gpu in GPUS:
        for toolchain in TOOLCHAINS:
            prefix = layout.plan_prefix(model, D64, gpu, toolchain, B64)
            folder = (model, D64[:12], gpu, toolchain, B64[:12])
            assert layout.parse_plan_prefix(prefix) == (*folder, "")
            for key, leaf in ((layout.plan_key(prefix), "model.plan"), (layout.manifest_key(prefix), "manifest.json"),
                              (layout.signature_key(prefix, "ab" * 32), layout.signature_name("ab" * 32))):
                assert layout.parse_plan_key(key) == (*folder, leaf)
                assert layout.folder_of(key) == prefix and layout.leaf_of(key) == leaf
            assert layout.leaf_of(prefix) == B64[:12]
            assert layout.parse_short_ref(layout.short_ref(layout.manifest_key(prefix))) == (model, gpu, B64[:12])
            release = layout.release_key(model, gpu, toolchain)
            assert layout.parse_release_key(release) == (model, gpu, toolchain)
            assert layout.parse_release_key(release).model == model
            assert {layout.parse_model(k) for k in (prefix, release, layout.channel_key(model, gpu, toolchain,
                    "candidate"), layout.receipts_prefix(model, gpu), layout.converted_prefix(model, D64, B64),
                    layout.gc_record_key(model, "2026", "ab"))} == {model}
        export = layout.export_prefix(model, "20261201T000000000000Z-0123456789ab")
        assert layout.parse_export_record_key(layout.export_file_key(export, layout.EXPORT_NAME)) == \
            (model, "20261201T000000000000Z-0123456789ab")
        assert layout.parse_report_key(layout.report_key(model, "local-1", "outcomes.json")) == \
            (model, "local-1", "outcomes.json")
        assert layout.parse_model(layout.report_key(model, "r", "x.md")) == layout.parse_model(export) == model


@pytest.mark.parametrize("flavour, version", [("tensorrt", "11.4.0.106"), ("tensorrt_rtx", "1.7.1.116"),
                                              ("tensorrt", "10.13.3")])
def test_a_toolchain_label_parses_back_into_its_flavour_and_version(flavour, version):
    label = layout.toolchain_label(flavour, version)
    assert layout.parse_toolchain_label(label) == (flavour, version)
    assert layout.parse_plan_prefix(layout.plan_prefix("m", D64, "h100", label, B64)).toolchain == label
    key = layout_shared.timing_cache_key(flavour, version, "h100", "9.0", B64) if version.count(".") == 3 else None
    assert key is None or layout_shared.timing_cache_flavour(key) == flavour


def test_keys_of_other_shapes_parse_to_none():
    prefix = layout.plan_prefix("encoder", D64, "h100", "tensorrt-11.4.0.106", B64)
    release = layout.release_key("encoder", "h100", "tensorrt-11.4.0.106")
    cache = layout_shared.timing_cache_key("tensorrt", "11.4.0.106", "h100", "9.0", B64)
    for parse, others in ((layout.parse_release_key, [prefix, layout.manifest_key(prefix), "releases/encoder/h100",
                                                      "releases/encoder/h100/x.json/y", "plans/encoder/h100/x.json"]),
                          (layout.parse_plan_prefix, [release, layout.manifest_key(prefix), "plans/encoder"]),
                          (layout.parse_short_ref, [release, layout.manifest_key(prefix), "encoder/h100",
                                                    "plans/encoder/h100"]),
                          (layout.parse_model, ["releases/encoder", "plans//x", layout.state_key("encoder"),
                                                layout_shared.job_result_key("r", "j"), layout_shared.status_page_key(),
                                                layout_shared.state_index_key(0), cache])):
        assert [k for k in others if parse(k) is not None] == [], parse.__name__
