"""trtfarm's TensorRT code against NVIDIA's real Python bindings of each supported version: the API, not behaviour.

The bindings wheels come from PyPI (cached); libnvinfer's nine entry points are null stubs compiled with ``cc``, so
the real module imports on a CPU machine, in a subprocess. Nothing is built or run through TensorRT here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tools.apicheck.check import check_versions, trtfarm_sources
from tools.apicheck.surface import bindings_env
from trtfarm.building.plan_manifest import _verification
from trtfarm.project.fleet_file import load_fleet
from trtfarm.vocabulary.fleet import TENSORRT_BINDINGS, Flavour
from trtfarm.vocabulary.manifest import Check

REPO = Path(__file__).resolve().parents[2]
BUILDER = "trtfarm/toolchain/builder.py"


@pytest.fixture(scope="module")
def sources():
    return trtfarm_sources()


def with_builder(sources, old: str, new: str) -> dict[str, str]:
    assert old in sources[BUILDER]
    return {**sources, BUILDER: sources[BUILDER].replace(old, new)}


def test_every_tensorrt_api_name_and_call_in_trtfarm_exists_in_each_supported_version(sources):
    reports = check_versions(sources=sources)
    assert sorted(reports) == sorted(TENSORRT_BINDINGS)
    for version, r in reports.items():
        assert (version, r.missing, r.signature_mismatches) == (version, [], [])
        # the uses of every TensorRT-only path were found, through inferred types, not only ``trt.X``
        for api in ("IBuilderConfig.set_flag", "BuilderFlag.REFIT_IDENTICAL", "HardwareCompatibilityLevel.NONE",
                    "IOptimizationProfile.set_shape", "ParserError.node_operator", "ITimingCache.combine",
                    "Runtime.deserialize_cuda_engine", "Runtime.engine_host_code_allowed",
                    "ICudaEngine.get_device_memory_size_for_profile_v2", "EngineInspector.get_engine_information",
                    "Refitter.get_missing_weights", "OnnxParserRefitter.refit_from_file",
                    "IProgressMonitor.step_complete", "IErrorRecorder.report_error", "Logger.min_severity",
                    "Builder.error_recorder", "Runtime.error_recorder", "IHostMemory.nbytes"):
            assert api in r.apis, (version, api)
        assert r.checked == len(r.apis) >= 80


def test_a_renamed_method_a_dropped_argument_and_a_removed_flag_are_reported(sources):
    changed = with_builder(sources, "config.clear_flag(trt.BuilderFlag.TF32)",
                           "config.clear_flags(trt.BuilderFlag.TF32)")
    changed = with_builder(changed, "p.set_shape(name, r.min, r.opt, r.max)", "p.set_shape(name, r.min, r.max)")
    changed = with_builder(changed, "config.builder_optimization_level = settings.optimization_level",
                           "config.builder_optimization_level = settings.optimization_level\n"
                           "    config.set_flag(trt.BuilderFlag.FP16)\n"
                           "    if hasattr(trt.BuilderFlag, 'INT8'):\n"
                           "        config.set_flag(trt.BuilderFlag.INT8)")
    reports = check_versions(sources=changed)
    for r in reports.values():
        assert any(m.startswith("IBuilderConfig.clear_flags at trtfarm/toolchain/builder.py:") for m in r.missing)
        assert any(m.startswith("IOptimizationProfile.set_shape(3 positional) at trtfarm/toolchain/builder.py:")
                   for m in r.signature_mismatches), r.signature_mismatches
    # FP16 was removed in 11: reported there only; INT8 is guarded by hasattr, so neither version reports it
    assert [m for m in reports["11.4.0.106"].missing if "FP16" in m or "INT8" in m] == \
        [m for m in reports["11.4.0.106"].missing if m.startswith("BuilderFlag.FP16 at ")]
    assert not [m for m in reports["10.16.1.11"].missing if "FP16" in m or "INT8" in m]
    assert "BuilderFlag.INT8" in reports["10.16.1.11"].apis and "BuilderFlag.INT8" not in reports["11.4.0.106"].apis


def test_a_misnamed_callback_an_undeclared_dynamic_name_and_a_read_only_write_are_reported(sources):
    changed = with_builder(sources, "def phase_finish(self, phase_name):", "def phase_finished(self, phase_name):")
    changed = with_builder(changed, "config.set_flag(getattr(trt.BuilderFlag, name))",
                           "config.set_flag(getattr(trt.BuilderFlag, name.lower()))")
    changed = with_builder(changed, "    return sorted(flags)\n",
                           "    builder.num_DLA_cores = 2\n    return sorted(flags)\n")
    for r in check_versions(sources=changed).values():
        assert any(m.startswith("IProgressMonitor.phase_finished at ") for m in r.missing), r.missing
        assert any(m.startswith("BuilderFlag.<name.lower()> (a name computed at run time") for m in r.missing)
        assert any(m.startswith("Builder.num_DLA_cores = ... at ") and "read-only" in m
                   for m in r.signature_mismatches)


def test_the_fleet_builds_only_tensorrt_versions_whose_api_is_checked():
    fleet = load_fleet(REPO / "gpu_targets.yaml")
    versions = {t.version for t in fleet.toolchains.values() if t.flavour is Flavour.tensorrt}
    assert versions and versions <= set(TENSORRT_BINDINGS)


@pytest.mark.parametrize(("flavour", "version", "status", "says"), [
    (Flavour.tensorrt, "11.4.0.106", "passed", "checked against the tensorrt 11.4.0.106 bindings API "
                                               "(tensorrt-cu13-bindings==11.4.0.106): names and signatures, not"),
    (Flavour.tensorrt, "10.16.1.11", "passed", "tensorrt 10.16.1.11 bindings API (tensorrt-cu12-bindings"),
    (Flavour.tensorrt, "10.13.3.9", "not_run", "tensorrt 10.13.3.9 is not in the checked list"),
    (Flavour.tensorrt_rtx, "1.7.1.116", "not_run", "TensorRT-RTX: built for real here"),
])
def test_the_manifest_claims_the_api_check_only_for_a_checked_tensorrt_version(flavour, version, status, says):
    ns = types.SimpleNamespace
    plan = ns(target=ns(toolchain=ns(flavour=flavour, version=version)))
    engine = Check(status="pending", detail="engine: pending on the GPU")
    v = _verification(ns(precision=None), plan, ns(header_version=version, wall_s=1.0), engine, {})
    assert v.api.status == status and says in v.api.detail
    assert v.built.status == "passed" and v.engine == engine  # distinct from "built" and from the GPU's check


def test_the_bench_prints_the_versions_json_shape():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "tensorrt_api.py"), "--json"], capture_output=True,
                          text=True, timeout=300, check=True)
    doc = json.loads(done.stdout)
    assert list(doc) == ["versions"] and sorted(doc["versions"]) == sorted(TENSORRT_BINDINGS)
    for r in doc["versions"].values():
        assert list(r) == ["checked", "missing", "signature_mismatches"]
        assert r["checked"] >= 80 and r["missing"] == [] and r["signature_mismatches"] == []


def drive(version: str) -> dict:
    env = {**os.environ, **bindings_env(version, TENSORRT_BINDINGS[version])}
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO)])
    done = subprocess.run([sys.executable, "-m", "tests.toolchain.drive_tensorrt"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("version", sorted(TENSORRT_BINDINGS))
def test_tensorrt_only_paths_run_against_standins_specified_by_that_versions_real_classes(version):
    """API only: the builder, timing cache, engine, refit, load_plan and validation paths run end to end on stand-ins
    whose every object is specified by the real bindings; the mutants (a renamed method, a dropped argument, a Path
    for a str, a callback of the wrong arity) must fail there."""
    results = drive(version)
    for name in ("builder", "builder_errors", "timing_cache", "timing_cache_after_publish", "engine", "refit",
                 "load_plan", "validation"):
        assert results[name]["ok"], (name, results[name].get("error"))
    assert results["timing_cache_after_publish"]["detail"].startswith(f"timing-caches/tensorrt-{version}/h100-sm90/")
    assert "ITimingCache.combine" in results["timing_cache_after_publish"]["calls"]
    assert "IBuilderConfig.set_flag" in results["builder"]["calls"]
    assert "callback IProgressMonitor.step_complete" in results["builder"]["calls"]
    assert f"{version} REFIT_IDENTICAL,STRIP_PLAN" in results["builder"]["detail"]
    assert "Runtime.engine_host_code_allowed=" in results["engine"]["calls"]
    assert "Refitter.refit_cuda_engine" in results["refit"]["calls"]
    assert results["load_plan"]["detail"].startswith("ICudaEngine; True deserialised: 1 profile(s), 3 I/O tensors")
    assert results["validation"]["detail"].startswith("5 tactics, memory [1048576]")
    assert "EngineInspector.get_engine_information" in results["validation"]["calls"]
    expected = {"mutant_renamed_method": "AttributeError: 'IBuilderConfig' object has no attribute "
                                         "'set_memory_pool_limits'",
                "mutant_dropped_argument": "TypeError: IOptimizationProfile.set_shape: no overload accepts 3",
                "mutant_path_for_str": "TypeError: OnnxParser.parse_from_file: no overload accepts 1 positional "
                                       "argument(s) of types ['PosixPath']",
                "mutant_callback_arity": "TypeError: Monitor.step_complete(self, step): TensorRT calls it as"}
    for name, error in expected.items():
        assert not results[name]["ok"] and results[name]["error"].startswith(error), (name, results[name])
