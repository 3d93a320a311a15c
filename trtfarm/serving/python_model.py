"""TensorRT-RTX plans on Triton's Python backend: the ``TritonPythonModel`` each version's ``model.py`` imports.

Triton's TensorRT backend links the image's TensorRT (libnvinfer) and cannot deserialise a TensorRT-RTX plan; its
Python backend runs any Python. ``trtfarm triton`` writes into each version folder the plans, each plan's manifest,
signature and provenance beside it (as ``pull`` does), and ``model.py`` (``MODEL_PY``), which imports the class below.
The contract is the Python backend's: ``initialize(args)``, ``execute(requests)`` returning one response per request,
``finalize()``.

``initialize``: the instance's GPU (``model_instance_device_id``, a CUDA ordinal) is matched by name and compute
capability to the plan built for it, which ``load_plan`` loads only after its checks (sha256, header, toolchain, GPU,
signature against the configured trusted keys): a mismatch fails the model's load with the reason. One execution
context per optimization profile. ``execute``: each request runs on the profile that holds its shapes (``Router``);
a shape outside every profile is that request's error, naming the ranges. The image's Python needs ``REQUIREMENTS``;
without them ``model.py`` fails the load saying so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REQUIREMENTS = "trtfarm[rtx] and cuda-python"
MODEL_PY = f'''"""Written by `trtfarm triton`: Triton's Python backend runs this version's TensorRT-RTX plans."""

try:
    from trtfarm.serving.python_model import TritonPythonModel  # noqa: F401
except ImportError as err:
    raise ImportError(f"{{err}}: this model needs {REQUIREMENTS} in the image's Python "
                      "(pip install 'trtfarm[rtx]' cuda-python)") from err
'''
NUMPY_DTYPES = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "UINT8": "uint8", "INT32": "int32",
                "INT64": "int64", "BOOL": "bool"}  # TensorRT DataType name -> numpy (what pb_utils tensors carry)


@dataclass(frozen=True)
class InstanceGpu:
    """The GPU a Triton instance runs on, as CUDA names it."""

    ordinal: int
    name: str
    compute_capability: str


class CudaDevice:
    """One GPU through cuda-python's runtime API: a stream, device buffers that grow, copies in and out."""

    def __init__(self, ordinal: int) -> None:
        from cuda.bindings import runtime as cudart

        self.rt, self.buffers = cudart, {}
        self._call(cudart.cudaSetDevice(ordinal))
        props = self._call(cudart.cudaGetDeviceProperties(ordinal))
        name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        self.info = InstanceGpu(ordinal, name.rstrip("\x00"), f"{props.major}.{props.minor}")
        self.stream = self._call(cudart.cudaStreamCreate())

    def _call(self, result):
        err, *rest = result
        if err != self.rt.cudaError_t.cudaSuccess:
            name = self.rt.cudaGetErrorName(err)[1]
            raise RuntimeError(f"CUDA call failed: {name.decode() if isinstance(name, bytes) else name}")
        return rest[0] if rest else None

    @property
    def handle(self) -> int:
        """The stream as TensorRT takes it."""
        return int(self.stream)

    def buffer(self, name: str, nbytes: int) -> int:
        """The device buffer of tensor ``name``, at least ``nbytes`` long (grown when a request needs more)."""
        ptr, size = self.buffers.get(name, (0, 0))
        if size < max(nbytes, 1):
            if ptr:
                self._call(self.rt.cudaFree(ptr))
            ptr, size = int(self._call(self.rt.cudaMalloc(max(nbytes, 1)))), max(nbytes, 1)
            self.buffers[name] = (ptr, size)
        return ptr

    def to_device(self, name: str, array) -> int:
        """Copy ``array`` (C-contiguous) into tensor ``name``'s buffer; its address."""
        ptr = self.buffer(name, array.nbytes)
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._call(self.rt.cudaMemcpyAsync(ptr, array.ctypes.data, array.nbytes, kind, self.stream))
        return ptr

    def from_device(self, name: str, array) -> None:
        """Copy tensor ``name``'s buffer into ``array`` (on the stream: ``sync`` before reading it)."""
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._call(self.rt.cudaMemcpyAsync(array.ctypes.data, self.buffers[name][0], array.nbytes, kind,
                                           self.stream))

    def sync(self) -> None:
        """Wait for the stream."""
        self._call(self.rt.cudaStreamSynchronize(self.stream))

    def close(self) -> None:
        """Free every buffer and the stream."""
        for ptr, _ in self.buffers.values():
            self._call(self.rt.cudaFree(ptr))
        self.buffers = {}
        self._call(self.rt.cudaStreamDestroy(self.stream))


def plan_for_device(folder: Path, device: InstanceGpu):
    """(plan path, the local GPU scan narrowed to ``device``) of the plan built for ``device``'s GPU model.

    ``PlanMismatch`` naming the device and the plans here when none is.
    """
    from trtfarm.machine.gpu import GpuScan, scan_gpus
    from trtfarm.runtime.loader import PlanMismatch, gpu_check
    from trtfarm.runtime.plan_files import find_pair

    scan = scan_gpus()
    same = tuple(g for g in scan.gpus if (g.name, g.compute_capability) == (device.name, device.compute_capability))
    mine = GpuScan(same[:1], scan.driver, scan.reason) if same else scan
    plans = sorted(folder.glob("model.*.plan"))
    manifests = {plan: find_pair(plan)[1] for plan in plans}
    for plan in sorted(plans, key=lambda p: manifests[p].target.gpu_name != device.name):  # its own GPU's first
        if gpu_check(manifests[plan], mine).ok:
            return plan, mine
    raise PlanMismatch(folder, [f"no plan here is for GPU {device.ordinal} ({device.name}, cc "
                                f"{device.compute_capability}): {', '.join(p.name for p in plans) or 'no plans'}"])


class PlanRunner:
    """A deserialised plan with one execution context per profile; ``run`` serves one request's arrays."""

    def __init__(self, engine, manifest, device: CudaDevice) -> None:
        from trtfarm.profiles.profile import Profile
        from trtfarm.runtime.router import Router

        self.engine, self.device, self.io = engine, device, list(manifest.plan.io)
        untyped = [t.name for t in self.io if t.dtype not in NUMPY_DTYPES]
        if untyped:
            from trtfarm.errors import UserInputError

            raise UserInputError(f"tensors {untyped} have types the Python backend's numpy tensors cannot carry")
        profiles = [Profile.model_validate(p) for p in manifest.build.profiles]
        self.router = Router(profiles) if profiles else None
        self.contexts = []
        for i in range(max(1, len(profiles))):
            context = engine.create_execution_context()
            if i:
                context.set_optimization_profile_async(i, device.handle)
            self.contexts.append(context)
        device.sync()

    def _profile(self, arrays: Mapping[str, object]) -> int:
        """The profile that holds the request's shapes as they are (``ShapeOutOfRange`` when none does)."""
        if self.router is None:
            return 0
        from trtfarm.runtime.router import ShapeOutOfRange

        shapes = {n: tuple(a.shape) for n, a in arrays.items() if n in self.router.inputs}
        route = self.router.route(shapes)
        if route.shapes != shapes:  # the router pads a short dim up to a profile's minimum: no padding here
            raise ShapeOutOfRange(f"request shape {shapes} is below the minimum of profile {route.profile}, the one "
                                  "that holds it: pad it to that minimum before sending it")
        return route.profile

    def run(self, arrays: Mapping[str, object]) -> dict[str, object]:
        """The outputs for one request's inputs (name -> numpy array)."""
        import numpy as np

        inputs = {t.name: np.ascontiguousarray(arrays[t.name], dtype=NUMPY_DTYPES[t.dtype])
                  for t in self.io if t.mode == "input"}
        context = self.contexts[self._profile(inputs)]
        for name, array in inputs.items():
            context.set_input_shape(name, array.shape)
            context.set_tensor_address(name, self.device.to_device(name, array))
        outputs = {}
        for t in (t for t in self.io if t.mode == "output"):
            shape = tuple(context.get_tensor_shape(t.name))
            if any(d < 0 for d in shape):
                raise RuntimeError(f"output {t.name} has a data-dependent shape {list(shape)}, which this model "
                                   "does not serve")
            outputs[t.name] = np.empty(shape, dtype=NUMPY_DTYPES[t.dtype])
            context.set_tensor_address(t.name, self.device.buffer(t.name, outputs[t.name].nbytes))
        if not context.execute_async_v3(self.device.handle):
            raise RuntimeError("TensorRT-RTX refused to run the request (execute_async_v3 returned False)")
        for name, array in outputs.items():
            self.device.from_device(name, array)
        self.device.sync()
        return outputs


def _batches(arrays: list[dict]) -> list[list[int]]:
    """Consecutive requests whose inputs agree in every dim but the first (the batch): one run each."""
    runs: list[list[int]] = []
    for i, a in enumerate(arrays):
        key = {n: x.shape[1:] for n, x in a.items()}
        if runs and key == {n: x.shape[1:] for n, x in arrays[runs[-1][0]].items()}:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


class TritonPythonModel:
    """Triton's Python backend model for a version folder that ``trtfarm triton`` wrote.

    With ``max_batch_size`` above 0 (``--dynamic-batching``), Triton hands ``execute`` the requests it batched, each
    with its own batch dim: those whose other dims agree run as one batch, and each gets its rows back.
    """

    device_type = CudaDevice  # what gives the instance's GPU (a test gives a stand-in)
    batched = False

    def initialize(self, args: dict) -> None:
        """Load the plan of this instance's GPU through ``load_plan`` and make one context per profile."""
        from trtfarm.runtime.loader import load_plan
        from trtfarm.runtime.plan_files import find_pair

        config = json.loads(args["model_config"])
        self.batched = config.get("max_batch_size", 0) > 0
        device = self.device_type(int(args.get("model_instance_device_id") or 0))
        folder = Path(args["model_repository"]) / str(args["model_version"])
        plan, gpus = plan_for_device(folder, device.info)
        engine = load_plan(plan, expected_model=config["name"], gpus=gpus)
        self.runner = PlanRunner(engine, find_pair(plan)[1], device)

    def _run(self, arrays: dict):
        """The outputs, or the request's own error (``UserInputError``: a shape outside every profile, say)."""
        from trtfarm.errors import UserInputError

        try:
            return self.runner.run(arrays)
        except UserInputError as err:
            return err

    def _results(self, arrays: list[dict]) -> list:
        if not self.batched:
            return [self._run(a) for a in arrays]
        import numpy as np

        results = []
        for run in _batches(arrays):
            joined = self._run({n: np.concatenate([arrays[i][n] for i in run]) for n in arrays[run[0]]})
            if len(run) == 1 or isinstance(joined, Exception):  # a refused batch: each request answers for itself
                results += [joined] if len(run) == 1 else [self._run(arrays[i]) for i in run]
                continue
            sizes = [len(next(iter(arrays[i].values()))) for i in run]  # each request's batch
            starts = np.cumsum([0, *sizes[:-1]])
            results += [{n: out[start:start + size] for n, out in joined.items()}
                        for start, size in zip(starts, sizes, strict=True)]
        return results

    def execute(self, requests: list) -> list:
        """One response per request: its outputs, or its error (a shape outside every profile, say)."""
        import triton_python_backend_utils as pb_utils

        names = [t.name for t in self.runner.io if t.mode == "input"]
        arrays = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in names} for r in requests]
        responses = []
        for result in self._results(arrays):
            if isinstance(result, Exception):
                error = pb_utils.TritonError(str(result), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in result.items()]))
        return responses

    def finalize(self) -> None:
        """Free the device buffers and the stream."""
        self.runner.device.close()
