"""The one builder, exercised for real through TensorRT-RTX's ahead-of-time build."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from trtfarm.errors import UserInputError
from trtfarm.profiles.profile import profile_from_args
from trtfarm.toolchain import BuildFailed, OnnxParseError, import_flavour, plan_from_onnx, read_plan_header
from trtfarm.toolchain.builder import RTX_NO_TIMING_CACHE
from trtfarm.vocabulary.fleet import BuilderSettings, RefitMode
from trtfarm.vocabulary.manifest import TensorIO

from ..conftest import ENCODER_PROFILE

trt = import_flavour("tensorrt_rtx")


def build(path, profiles, tmp_path, settings=BuilderSettings(), **kw):
    return plan_from_onnx(trt, "tensorrt_rtx", path, profiles, settings, tmp_path / "model.plan", **kw)


class Recorder:
    def __init__(self):
        self.started, self.steps = [], 0

    def phase_start(self, name, parent, steps):
        self.started.append((name, parent))

    def step_complete(self, name, step):
        self.steps += 1
        return True

    def phase_finish(self, name):
        pass


def test_example_encoder_builds_a_plan_with_a_readable_header(example_onnx, tmp_path):
    rec = Recorder()
    result = build(example_onnx, [profile_from_args(ENCODER_PROFILE)], tmp_path, progress=rec)
    assert result.plan_path.stat().st_size == result.plan_bytes > 100_000
    header = read_plan_header(result.plan_path)
    assert header.magic_ok and header.flavour == "tensorrt_rtx" and header.version == trt.__version__
    assert ("Building engine", None) in rec.started and rec.steps > 10
    assert result.timing_cache is None and result.timing_cache_reason == RTX_NO_TIMING_CACHE
    assert result.flags == ["TF32"] and result.hardware_compatibility_level == "NONE"
    assert result.io == [TensorIO(name="input_ids", mode="input", dtype="INT64", shape=[-1, -1]),
                         TensorIO(name="attention_mask", mode="input", dtype="INT64", shape=[-1, -1]),
                         TensorIO(name="embeddings", mode="output", dtype="FLOAT", shape=[-1, 64])]


def test_two_profiles_build_and_cancelling_from_the_monitor_stops_the_build(example_onnx, tmp_path):
    short = profile_from_args(["input_ids=1x16:32x64:32x128", "attention_mask=1x16:32x64:32x128"])
    long = profile_from_args(["input_ids=1x129:8x384:16x512", "attention_mask=1x129:8x384:16x512"])
    assert build(example_onnx, [short, long], tmp_path).plan_bytes > 0

    class Cancel(Recorder):
        def step_complete(self, name, step):
            return False

    with pytest.raises(BuildFailed):
        build(example_onnx, [short], tmp_path / "c", progress=Cancel())


def test_a_build_beside_a_check_that_refused_the_model_is_cancelled_and_one_beside_a_passed_check_is_not(
        example_onnx, tmp_path):
    """A local build runs onnx.checker beside TensorRT's build; the build's progress (``_UntilRefused``) cancels it
    at its next step once the check refused the model, and passes every step to the display otherwise."""
    from concurrent.futures import Future

    from trtfarm.building.build import _UntilRefused
    from trtfarm.errors import InvalidModel

    profile = [profile_from_args(ENCODER_PROFILE)]
    refused, passed = Future(), Future()
    refused.set_exception(InvalidModel("refused by onnx.checker"))
    passed.set_result(None)
    display = Recorder()
    with pytest.raises(BuildFailed):
        build(example_onnx, profile, tmp_path / "refused", progress=_UntilRefused(display, refused))
    assert display.steps == 0 and display.started  # cancelled at its first step
    assert build(example_onnx, profile, tmp_path / "passed", progress=_UntilRefused(display, passed)).plan_bytes > 0
    assert display.steps > 0


def test_tf32_off_and_refit_individual_are_set_by_name(example_onnx, tmp_path):
    settings = BuilderSettings(tf32=False, refit=RefitMode.refit_individual)
    result = build(example_onnx, [profile_from_args(ENCODER_PROFILE)], tmp_path, settings)
    assert result.flags == ["REFIT_INDIVIDUAL"]


def test_a_profile_violating_shape_constraints_fails_with_the_builders_message(example_onnx, tmp_path):
    bad = profile_from_args(["input_ids=1x16:16x128:32x512", "attention_mask=1x16:16x64:32x512"])
    with pytest.raises(BuildFailed) as err:
        build(example_onnx, [bad], tmp_path)
    assert "kOPT values are not self-consistent" in str(err.value)
    assert "128 != 64" in str(err.value)
    assert not (tmp_path / "model.plan").exists()


def test_a_missing_profile_and_an_unknown_input_are_user_errors(example_onnx, tmp_path):
    with pytest.raises(UserInputError, match="dynamic dimensions but no optimization profile"):
        build(example_onnx, [], tmp_path)
    with pytest.raises(UserInputError, match="no input 'token_ids'"):
        build(example_onnx, [profile_from_args(["token_ids=1x1:1x1:1x1"])], tmp_path)


def _model_with(tmp_path, node, domain=None):
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])], outputs)
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    path = tmp_path / f"{node.op_type}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


@pytest.mark.parametrize("node, domain, code", [
    (helper.make_node("Unique", ["x"], ["y"], name="dedupe", sorted=1), None, "UNSUPPORTED_NODE"),
    (helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example"), "com.example", "INVALID_NODE"),
])
def test_rejected_operators_report_node_name_and_operator(tmp_path, node, domain, code):
    path = _model_with(tmp_path, node, domain)
    with pytest.raises(OnnxParseError) as err:
        build(path, [profile_from_args(["x=1x4:2x4:4x4"])], tmp_path)
    issue = err.value.issues[0]
    assert (issue.node_name, issue.node_operator, issue.code) == (node.name, node.op_type, code)
    assert f"'{node.name}' ({node.op_type})" in str(err.value)


def test_truncated_onnx_is_reported_by_the_parser(example_onnx, tmp_path):
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(example_onnx.read_bytes()[:4000])
    with pytest.raises(OnnxParseError, match="MODEL_DESERIALIZE_FAILED"):
        build(bad, [], tmp_path)


def test_header_of_non_plan_bytes_is_not_recognised(tmp_path):
    assert not read_plan_header(b"\x00" * 64).magic_ok
    assert read_plan_header(b"ftrt" + b"\x00" * 20 + bytes([11, 4, 0, 106])).version == "11.4.0.106"


# Runs in a child: once the build starts (its first phase), the process may map only 64 MiB more, so the real
# TensorRT-RTX builder's allocations fail there (std::bad_alloc, "Error Code 2: OutOfMemory" by the size asked).
OUT_OF_MEMORY_BUILD = """
import json, re, resource, sys
from pathlib import Path
from prefect.states import Failed
from tasks.build import retry_infrastructure_only
from trtfarm.errors import InfrastructureError
from trtfarm.vocabulary.fleet import BuilderSettings
from trtfarm.toolchain import import_flavour, plan_from_onnx

class LimitMemory:
    def phase_start(self, name, parent, steps):
        if parent is None:
            vm = int(re.search(r"VmSize:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) << 10
            resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20),) * 2)
    def step_complete(self, name, step):
        return True
    def phase_finish(self, name):
        pass

try:
    plan_from_onnx(import_flavour("tensorrt_rtx"), "tensorrt_rtx", Path(sys.argv[1]), [], BuilderSettings(),
                   Path(sys.argv[2]), progress=LimitMemory())
except Exception as err:
    print(json.dumps({"error": type(err).__name__, "infrastructure": isinstance(err, InfrastructureError),
                      "retried": retry_infrastructure_only(None, None, Failed(data=err)), "message": str(err)}))
"""


def test_a_builder_out_of_memory_is_an_infrastructure_failure_that_is_retried(tmp_path):
    import json
    import os
    import subprocess
    import sys

    import numpy as np
    from onnx import numpy_helper

    from ..conftest import REPO

    weights = numpy_helper.from_array(np.random.default_rng(0).random((1024, 1024), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 1024])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY_BUILD, str(tmp_path / "m.onnx"),
                           str(tmp_path / "m.plan")], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=240)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["error"] == "BuilderOutOfMemory" and seen["infrastructure"] and seen["retried"], seen
    assert "the tensorrt_rtx builder ran out of memory on" in seen["message"] and "Retried" in seen["message"]
    assert not (tmp_path / "m.plan").exists()


def test_a_builder_refusal_stays_a_build_failure_that_is_not_retried(example_onnx, tmp_path):
    from prefect.states import Failed

    from tasks.build import retry_infrastructure_only

    bad = profile_from_args(["input_ids=1x16:16x128:32x512", "attention_mask=1x16:16x64:32x512"])
    with pytest.raises(BuildFailed) as err:
        build(example_onnx, [bad], tmp_path)
    assert not retry_infrastructure_only(None, None, Failed(data=err.value))


def test_a_farm_build_logs_its_phases_to_the_logger_it_is_given(example_onnx, tmp_path):
    import logging

    from trtfarm.building.phase_log import LoggingProgress

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    run_log, lines = logging.getLogger("test.run-logger"), Lines()  # stands where the task's run logger is
    run_log.addHandler(lines)
    run_log.setLevel(logging.INFO)
    build(example_onnx, [profile_from_args(ENCODER_PROFILE)], tmp_path, progress=LoggingProgress("rtx4090", run_log))
    assert any(line.startswith("rtx4090: Building engine (") for line in lines.lines), lines.lines


def test_tensorrt_filters_its_own_log_and_its_errors_come_through_the_recorder(example_onnx, tmp_path):
    """The logger handed to TensorRT is its own ``Logger``, which drops what is below ``min_severity`` inside the
    library (a Python ``ILogger`` gets every VERBOSE message of a build); the builder's errors still reach us."""
    from trtfarm.toolchain.trtlog import captured_log, set_log_severity

    with captured_log(trt) as (logger, log):
        assert type(logger) is trt.Logger and logger.min_severity == trt.Logger.ERROR
        assert isinstance(log.recorder, trt.IErrorRecorder)
    set_log_severity("VERBOSE")
    try:
        with captured_log(trt) as (logger, _):
            assert logger.min_severity == trt.Logger.VERBOSE
    finally:
        set_log_severity("ERROR")
    with pytest.raises(ValueError, match="use one of"):
        set_log_severity("LOUD")
    bad = profile_from_args(["input_ids=1x16:16x128:32x512", "attention_mask=1x16:16x64:32x512"])
    with pytest.raises(BuildFailed, match="kOPT values are not self-consistent"):
        build(example_onnx, [bad], tmp_path)
