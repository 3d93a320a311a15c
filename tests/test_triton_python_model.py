"""The Python backend's model for TensorRT-RTX plans (``trtfarm/serving/python_model.py``), without a GPU.

Given a stand-in engine and device (host memory behind made-up addresses: what ``CudaDevice`` does with cuda-python
was run on an H200, see docs/serving.md), when Triton's Python backend calls ``execute`` with requests, then each
request runs on the profile that holds its shapes, with its outputs at the shapes the engine gives, and a request no
profile holds gets its own error while the others are answered. ``model.py`` without trtfarm says what to install;
``initialize`` picks the plan of the instance's GPU and loads it through ``load_plan``, whose refusal fails the load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest

from trtfarm.profiles.profile import profiles_json
from trtfarm.runtime.plan_files import find_pair, manifest_beside
from trtfarm.serving.python_model import MODEL_PY, REQUIREMENTS, PlanRunner, TritonPythonModel

from .conftest import REPO
from .test_triton import PROFILES
from .test_triton_load import manifest


class Device:
    """Host memory behind made-up addresses, with ``CudaDevice``'s calls."""

    handle = 7

    def __init__(self, ordinal: int = 0) -> None:
        self.memory: dict[int, bytearray] = {}
        self.buffers: dict[str, tuple[int, int]] = {}
        self.closed = False

    def buffer(self, name: str, nbytes: int) -> int:
        ptr, size = self.buffers.get(name, (0, 0))
        if size < max(nbytes, 1):
            ptr = 1000 + len(self.memory)
            self.memory[ptr], self.buffers[name] = bytearray(max(nbytes, 1)), (ptr, max(nbytes, 1))
        return ptr

    def to_device(self, name: str, array) -> int:
        ptr = self.buffer(name, array.nbytes)
        self.memory[ptr][: array.nbytes] = array.tobytes()
        return ptr

    def from_device(self, name: str, array) -> None:
        ptr = self.buffers[name][0]
        array[...] = np.frombuffer(bytes(self.memory[ptr][: array.nbytes]), dtype=array.dtype).reshape(array.shape)

    def sync(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Context:
    """embeddings[b, :] = the profile's index * 1000 + the sum of row b of input_ids (what the test can check)."""

    def __init__(self, device: Device) -> None:
        self.device, self.profile, self.shapes, self.addresses = device, 0, {}, {}

    def set_optimization_profile_async(self, index: int, stream: int) -> bool:
        assert stream == Device.handle
        self.profile = index
        return True

    def set_input_shape(self, name: str, shape) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str):
        return (self.shapes["input_ids"][0], 64)

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.addresses[name] = ptr
        return True

    def execute_async_v3(self, stream: int) -> bool:
        ids = np.frombuffer(bytes(self.device.memory[self.addresses["input_ids"]]), dtype=np.int64)
        ids = ids[: int(np.prod(self.shapes["input_ids"]))].reshape(self.shapes["input_ids"])
        out = np.repeat((self.profile * 1000 + ids.sum(axis=1)).astype(np.float32)[:, None], 64, axis=1)
        self.device.memory[self.addresses["embeddings"]][: out.nbytes] = out.tobytes()
        return True


class Engine:
    def __init__(self, device: Device) -> None:
        self.device, self.contexts = device, []

    def create_execution_context(self) -> Context:
        self.contexts.append(Context(self.device))
        return self.contexts[-1]


@pytest.fixture
def pb_utils(monkeypatch):
    """Triton's ``triton_python_backend_utils``: the calls the model makes, as the Python backend documents them."""
    mod = types.ModuleType("triton_python_backend_utils")

    class TritonError(Exception):
        INVALID_ARG = "INVALID_ARG"

        def __init__(self, message: str, code: str = "INTERNAL") -> None:
            super().__init__(message)
            self.code = code

    mod.TritonError = TritonError
    mod.Tensor = lambda name, array: (name, array)
    mod.InferenceResponse = lambda output_tensors=(), error=None: types.SimpleNamespace(
        outputs=dict(output_tensors), error=error)
    mod.get_input_tensor_by_name = lambda request, name: types.SimpleNamespace(as_numpy=lambda: request[name])
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", mod)
    return mod


def model_of(runner: PlanRunner) -> TritonPythonModel:
    model = TritonPythonModel()
    model.runner = runner
    return model


def request(batch: int, seq: int, value: int = 1) -> dict:
    ids = np.full((batch, seq), value, dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def test_each_request_runs_on_the_profile_that_holds_it_and_one_outside_them_all_gets_its_own_error(pb_utils):
    device = Device()
    engine = Engine(device)
    runner = PlanRunner(engine, manifest("tensorrt_rtx", "rtx-4090", profiles_json(PROFILES)), device)
    assert [c.profile for c in engine.contexts] == [0, 1]  # one context per profile, each set to its own

    responses = model_of(runner).execute([request(4, 64), request(2, 300, value=2), request(2, 600),
                                          request(2, 8), request(40, 64)])

    short, long_, too_long, too_short, too_many = responses
    assert short.error is None and short.outputs["embeddings"].shape == (4, 64)
    assert short.outputs["embeddings"].dtype == np.float32 and (short.outputs["embeddings"] == 64).all()
    assert (long_.outputs["embeddings"] == 1000 + 600).all()  # profile 1 (seq 129..512), rows of 300 twos
    for bad in (too_long, too_short, too_many):
        assert bad.outputs == {} and bad.error.code == pb_utils.TritonError.INVALID_ARG
    assert "outside every optimization profile" in str(too_long.error) and "input_ids dim 1 = 600" in str(
        too_long.error)
    assert "below the minimum of profile 0" in str(too_short.error)
    assert device.buffers["input_ids"][1] >= 2 * 300 * 8  # grown for the longer request, kept since


def test_with_dynamic_batching_requests_whose_other_dims_agree_run_as_one_batch_each_getting_its_rows(pb_utils):
    device = Device()
    engine = Engine(device)
    model = model_of(PlanRunner(engine, manifest("tensorrt_rtx", "rtx-4090", profiles_json(PROFILES)), device))
    model.batched = True  # max_batch_size > 0: what Triton's dynamic batcher gathered comes in one call
    runs = []
    for context in engine.contexts:
        context.execute_async_v3 = (lambda run: lambda stream: runs.append(1) or run(stream))(context.execute_async_v3)

    one, three, other, bad, last = model.execute([request(1, 64, 1), request(3, 64, 2), request(2, 32, 3),
                                                  request(2, 600), request(1, 600)])

    assert [r.outputs["embeddings"].shape for r in (one, three, other)] == [(1, 64), (3, 64), (2, 64)]
    assert (one.outputs["embeddings"] == 64).all() and (three.outputs["embeddings"] == 128).all()
    assert (other.outputs["embeddings"] == 96).all()
    assert bad.error is not None and last.error is not None  # their joined batch refused: each answers itself
    assert len(runs) == 2  # [1+3, 64] and [2, 32] ran once each; the refused ones never reached the engine


def test_model_py_without_trtfarm_fails_the_load_naming_what_to_install(tmp_path):
    done = subprocess.run([sys.executable, "-S", "-c", MODEL_PY], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and f"this model needs {REQUIREMENTS} in the image's Python" in done.stderr
    assert "pip install 'trtfarm[rtx]' cuda-python" in done.stderr.strip().splitlines()[-1]


INITIALIZE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from tests.test_triton_python_model import Device
from trtfarm.serving.python_model import TritonPythonModel

class Model(TritonPythonModel):
    device_type = staticmethod(lambda ordinal: type("D", (Device,), {{"info": {info}}})(ordinal))

try:
    Model().initialize({{"model_config": json.dumps({{"name": "encoder"}}), "model_instance_device_id": "0",
                        "model_repository": {repo_dir!r}, "model_version": "1", "model_name": "encoder"}})
except Exception as err:
    print(type(err).__name__, err)
"""


@pytest.mark.parametrize("nvml, device, said", [
    ("NVIDIA GeForce RTX 4090:8.9:24", "NVIDIA GeForce RTX 4090", "header check refused it"),
    ("NVIDIA H200:9.0:140.4", "NVIDIA H200", "no plan here is for GPU 0 (NVIDIA H200, cc 9.0): model.rtx-4090.plan"),
])
def test_initialize_loads_the_plan_of_the_instances_gpu_through_load_plan_and_its_refusal_fails_the_load(
        tmp_path, nvml, device, said):
    folder = tmp_path / "encoder/1"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL_PY)
    plan = folder / "model.rtx-4090.plan"
    plan.write_bytes(b"vtrt" + bytes(20) + bytes([1, 7, 1, 116]) + b"x" * 100)  # a made-up TensorRT-RTX plan
    m = manifest("tensorrt_rtx", "rtx-4090", profiles_json(PROFILES))
    from trtfarm.identity import sha256_file

    m = m.model_copy(update={"plan": m.plan.model_copy(update={"sha256": sha256_file(plan), "bytes": 128})})
    manifest_beside(plan).write_text(m.model_dump_json())
    assert find_pair(plan)[1].target.gpu == "rtx-4090"
    cc = "8.9" if "4090" in device else "9.0"
    info = f"__import__('trtfarm.serving.python_model').serving.python_model.InstanceGpu(0, {device!r}, {cc!r})"
    code = INITIALIZE.format(repo=str(REPO), info=info, repo_dir=str(tmp_path / "encoder"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests/fake_nvml"), "FAKE_NVML_GPUS": nvml,
           "TRTFARM_TRUSTED_KEYS": ""}

    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(("RuntimeRefused", "PlanMismatch")) and said in done.stdout, done.stdout
