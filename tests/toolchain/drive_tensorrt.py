"""Drive trtfarm's TensorRT-only functions through a stand-in ``tensorrt`` specified by one real bindings version.

Run in a subprocess whose ``PYTHONPATH``/``LD_LIBRARY_PATH`` make ``import tensorrt_bindings`` give that version
(``tools.apicheck.surface.bindings_env``): ``python -m tests.toolchain.drive_tensorrt SCENARIO...``. Prints one
JSON object, {scenario: {"ok": bool, "detail" | "error": str, "calls": [names]}}. The stand-in is installed as
``sys.modules["tensorrt"]``, so ``import_flavour("tensorrt")`` and ``import tensorrt`` inside trtfarm (and inside
Polygraphy's loaders) get it. This checks the API, not TensorRT's behaviour: every result is scripted.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

from tests.toolchain.standin import StandInModule, buffer_standin
from trtfarm.profiles.profile import profile_from_args
from trtfarm.vocabulary.fleet import BuilderSettings, HardwareCompatibility, RefitMode

REPO = Path(__file__).resolve().parents[2]
INSPECTOR = (REPO / "tests" / "data" / "inspector_11x_release1.json").read_text()
ONE_INPUT = {"INetworkDefinition.num_inputs": 1, "ITensor.name": "x", "ITensor.shape": (-1, 8),
             "ITensor.is_shape_tensor": False}
SETTINGS = [BuilderSettings(), BuilderSettings(tf32=False, refit=RefitMode.refit_identical, strip_plan=True,
                                               hardware_compatibility=HardwareCompatibility.same_compute_capability),
            BuilderSettings(refit=RefitMode.refit, hardware_compatibility=HardwareCompatibility.ampere_plus,
                            detailed_profiling=False, timing_cache=False),
            BuilderSettings(refit=RefitMode.refit_individual, optimization_level=5)]


def _plan_bytes(trt, version: str) -> bytes:
    parts = [int(p) for p in version.split(".")]
    return (0x74727466).to_bytes(4, "little") + bytes(20) + bytes(parts) + bytes(36)


def _build(trt, tmp: Path, builder_module=None) -> str:
    builder = builder_module or importlib.import_module("trtfarm.toolchain.builder")
    profiles = [profile_from_args(["x=1x8:4x8:16x8"])]
    trt.returns.update(ONE_INPUT)
    trt.returns["Builder.build_serialized_network"] = lambda: buffer_standin(trt, trt._real.IHostMemory,
                                                                             _plan_bytes(trt, trt.__version__))
    out = []
    for i, settings in enumerate(SETTINGS):
        r = builder.plan_from_onnx(trt, "tensorrt", tmp / "m.onnx", profiles, settings, tmp / f"{i}.plan",
                                   timing_cache=b"cache", progress=None)
        out.append(f"{r.header_version} {','.join(r.flags)} cache={r.timing_cache is not None}")
    return "; ".join(out)


def scenario_builder(trt, tmp: Path) -> str:
    """``plan_from_onnx`` with the tensorrt flavour, four settings (flags, levels, refit, strip, timing cache)."""
    return _build(trt, tmp)


def scenario_builder_parse_errors(trt, tmp: Path) -> str:
    """A rejected parse reads every parser error; a failed build raises BuildFailed."""
    from trtfarm.toolchain import BuildFailed, OnnxParseError, plan_from_onnx

    trt.returns.update({"OnnxParser.parse_from_file": False, "OnnxParser.num_errors": 2})
    try:
        plan_from_onnx(trt, "tensorrt", tmp / "m.onnx", [], BuilderSettings(), tmp / "p.plan")
    except OnnxParseError as err:
        parsed = f"{len(err.issues)} parser issues"
    else:
        raise AssertionError("a rejected parse did not raise OnnxParseError")
    trt.returns.update({"OnnxParser.parse_from_file": True, "Builder.build_serialized_network": None, **ONE_INPUT})
    try:
        plan_from_onnx(trt, "tensorrt", tmp / "m.onnx", [profile_from_args(["x=1x8:4x8:16x8"])], BuilderSettings(),
                       tmp / "p.plan")
    except BuildFailed:
        return parsed + "; BuildFailed"
    raise AssertionError("a build that returned None did not raise BuildFailed")


def scenario_timing_cache(trt, tmp: Path) -> str:
    """``timing_cache_entries`` and the ``ITimingCache.combine`` merge."""
    from trtfarm.building.timing_cache import tensorrt_combine
    from trtfarm.toolchain.engine import timing_cache_entries

    trt.returns["ITimingCache.queryKeys"] = lambda: ["k1", "k2"]
    merged = tensorrt_combine(trt)(b"current", b"ours")
    return f"entries={timing_cache_entries(trt, b'blob')} merged={type(merged).__name__}"


def _build_group(trt, tmp: Path, store, shared: bytes | None) -> tuple[list, str]:
    """``build_group`` for one TensorRT target on a real file store, ``shared`` (if any) as the shared cache."""
    from trtfarm.building import build
    from trtfarm.building.timing_cache import cache_flags_digest
    from trtfarm.layout_shared import timing_cache_key
    from trtfarm.modelfile import model_source
    from trtfarm.vocabulary.fleet import Fleet, resolve_target
    from trtfarm.vocabulary.targets import plan_targets

    fleet = Fleet.model_validate({
        "toolchains": {"trt": {"flavour": "tensorrt", "version": trt.__version__}},
        "gpus": {"h100": {"nvml_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_gib": 80,
                          "pool": "h100"}},
        "targets": [{"id": "h100-trt", "gpu": "h100", "toolchain": "trt", "release_on": "built"}]})
    target = resolve_target(fleet, fleet.targets[0])
    model = model_source(_tiny_onnx(tmp), "tiny")
    profiles = [profile_from_args(["x=1x4:2x4:4x4"])]
    plans = plan_targets(model, model.onnx_digest, [target], profiles, None)
    key = timing_cache_key("tensorrt", trt.__version__, "h100", "9.0", cache_flags_digest(target.settings))
    if shared is not None:
        store.put_if_absent(key, shared)
    trt.returns.update({"INetworkDefinition.num_inputs": 1, "ITensor.name": "x", "ITensor.shape": (-1, 4),
                        "ITensor.is_shape_tensor": False,
                        "Builder.build_serialized_network": lambda: buffer_standin(
                            trt, trt._real.IHostMemory, _plan_bytes(trt, trt.__version__)),
                        "ITimingCache.serialize": lambda: buffer_standin(trt, trt._real.IHostMemory, b"ours")})
    pending = lambda store, model, plan, profiles, result: build.EngineResult(build.pending_engine(plan))  # noqa: E731
    with mock.patch.object(build, "engine_result", pending):  # the engine checks need the GPU
        return build.build_group(store, model, plans, profiles), key


def scenario_timing_cache_after_publish(trt, tmp: Path) -> str:
    """``build_group`` publishes the plan first; a shared cache ``combine`` refuses is a warning, the plan stays."""
    from trtfarm.publishing.publish import read_manifest
    from trtfarm.store import LocalStore

    trt.returns["ITimingCache.combine"] = False  # the shared object came from another TensorRT build or device
    store = LocalStore(tmp / "refused")
    (outcome,), key = _build_group(trt, tmp, store, b"another build's cache")
    m = read_manifest(store, outcome.manifest_key)
    assert outcome.status == "built" and store.get(m.plan.key) is not None, outcome
    assert f"timing cache not merged into {key} (the plan is published)" in outcome.reason, outcome.reason
    assert store.get(key).data == b"another build's cache" and m.build.timing_cache.key == key
    fresh = LocalStore(tmp / "fresh")
    (first,), key = _build_group(trt, tmp, fresh, None)
    assert "timing cache" not in first.reason and fresh.get(key).data == b"ours", first.reason
    return f"{key}; refused: {outcome.reason.rsplit('; ', 1)[-1]}"


def scenario_engine(trt, tmp: Path) -> str:
    """``deserialize_plan`` (version-compatible host code allowed), the validity probe, memory per profile."""
    from trtfarm.toolchain.engine import deserialize_plan, device_memory_per_profile, engine_validity

    trt.returns.update({"ICudaEngine.num_optimization_profiles": 2,
                        "ICudaEngine.get_device_memory_size_for_profile_v2": 1 << 20})
    engine = deserialize_plan(trt, _plan_bytes(trt, trt.__version__), allow_host_code=True)
    return f"validity={engine_validity(trt, b'header')} memory={device_memory_per_profile(engine)}"


def scenario_refit(trt, tmp: Path) -> str:
    """``refit_plan``: Refitter + OnnxParserRefitter, then re-serialised with the weights; and a refused refit."""
    from trtfarm.toolchain.refitter import RefitFailed, refit_plan

    trt.returns.update({"ICudaEngine.refittable": True,
                        "ICudaEngine.serialize_with_config": lambda: buffer_standin(trt, trt._real.IHostMemory,
                                                                                    b"refitted")})
    data = refit_plan(trt, b"plan", tmp / "m.onnx")
    trt.returns.update({"OnnxParserRefitter.refit_from_file": False, "OnnxParserRefitter.num_errors": 1})
    try:
        refit_plan(trt, b"plan", tmp / "m.onnx")
    except RefitFailed:
        return f"{data!r}; refused refit raised RefitFailed"
    raise AssertionError("a refused refit did not raise RefitFailed")


def scenario_load_plan(trt, tmp: Path) -> str:
    """``load_plan``'s runtime step and ``verify``'s ``runtime_check`` (both through ``import_flavour``)."""
    from trtfarm.runtime import loader

    plan = tmp / "model.plan"
    plan.write_bytes(_plan_bytes(trt, trt.__version__))
    manifest = types.SimpleNamespace(target=types.SimpleNamespace(flavour="tensorrt", version_compatible=True))
    trt.returns.update({"ICudaEngine.num_optimization_profiles": 1, "ICudaEngine.num_io_tensors": 3})
    files = types.SimpleNamespace(plan=plan, manifest=manifest)
    with mock.patch.object(loader, "find_files", return_value=files), \
            mock.patch.object(loader, "static_checks", return_value=[]):
        engine = loader.load_plan(plan)
    check = loader.runtime_check(plan, manifest)
    return f"{type(engine).__name__}; {check.ok} {check.detail}"


def scenario_validation(trt, tmp: Path) -> str:
    """``validate_engine`` (Polygraphy's EngineFromBytes on the stand-in, the inspector's tactics, memory, latency);
    Polygraphy's runners are replaced: they execute on a GPU."""
    from trtfarm.precision.recipe import Recipe
    from trtfarm.validation import engine_gpu

    trt.returns.update({"EngineInspector.get_engine_information": INSPECTOR,
                        "ICudaEngine.num_optimization_profiles": 1,
                        "ICudaEngine.get_device_memory_size_for_profile_v2": 1 << 20})
    onnx_path = _tiny_onnx(tmp)
    plan = tmp / "v.plan"
    plan.write_bytes(_plan_bytes(trt, trt.__version__))

    class Runner:  # Polygraphy's TrtRunner/OnnxrtRunner stand-in (not TensorRT's API)
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def infer(self, feed):
            return {"y": feed["x"]}

        def last_inference_time(self):
            return 0.001

    import polygraphy.backend.onnxrt as ort
    import polygraphy.backend.trt as ptrt

    with mock.patch.object(ptrt, "TrtRunner", Runner), mock.patch.object(ort, "OnnxrtRunner", Runner), \
            mock.patch.object(engine_gpu, "_free_gpu_bytes", return_value=8 << 30), \
            mock.patch.object(engine_gpu.shutil, "which", return_value=None):
        v = engine_gpu.validate_engine(plan, onnx_path, [profile_from_args(["x=1x4:2x4:4x4"])], Recipe(),
                                       warmup=1, iterations=3)
    return f"{len(v.tactics)} tactics, memory {v.memory_per_profile}, p50 {v.latency[0].p50}"


def _tiny_onnx(tmp: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    path = tmp / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def mutant(old: str, new: str):
    """A scenario running ``plan_from_onnx`` from a copy of builder.py with ``old`` replaced by ``new``."""

    def run(trt, tmp: Path) -> str:
        source = (REPO / "trtfarm" / "toolchain" / "builder.py").read_text()
        assert old in source, f"{old!r} is not in builder.py"
        module = types.ModuleType("trtfarm_mutant_builder")
        sys.modules[module.__name__] = module  # dataclasses look their module up
        exec(compile(source.replace(old, new), "builder_mutant.py", "exec"), module.__dict__)  # noqa: S102
        return _build(trt, tmp, module)

    return run


SCENARIOS = {
    "builder": scenario_builder, "builder_errors": scenario_builder_parse_errors,
    "timing_cache": scenario_timing_cache, "timing_cache_after_publish": scenario_timing_cache_after_publish,
    "engine": scenario_engine, "refit": scenario_refit,
    "load_plan": scenario_load_plan, "validation": scenario_validation,
    # negative controls: a renamed method, a dropped argument, a Path where the API takes a str, a wrong callback
    "mutant_renamed_method": mutant("config.set_memory_pool_limit(", "config.set_memory_pool_limits("),
    "mutant_dropped_argument": mutant("p.set_shape(name, r.min, r.opt, r.max)", "p.set_shape(name, r.min, r.max)"),
    "mutant_path_for_str": mutant("parser.parse_from_file(str(onnx_path))", "parser.parse_from_file(onnx_path)"),
    "mutant_callback_arity": mutant("def step_complete(self, phase_name, step):", "def step_complete(self, step):"),
}


def main(names: list[str]) -> dict:
    """Run the named scenarios on one stand-in module (results scripted per scenario)."""
    real = importlib.import_module("tensorrt_bindings")
    trt = StandInModule(real)
    sys.modules["tensorrt"] = trt
    from trtfarm.machine.flavour import import_flavour

    import_flavour.cache_clear()
    results = {}
    for name in names or list(SCENARIOS):
        trt.returns, trt.calls = {}, []
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "m.onnx").write_bytes(b"onnx")
            try:
                results[name] = {"ok": True, "detail": SCENARIOS[name](trt, Path(tmp))}
            except Exception as err:  # noqa: BLE001 - the scenario's outcome is the report
                results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        results[name]["calls"] = sorted({c[0] for c in trt.calls})
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
