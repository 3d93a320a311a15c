"""Refit: load new weights from an ONNX export into a refittable engine, without a rebuild. GPU only.

Written to the documented API (TensorRT 11 and TensorRT-RTX share it): deserialize the plan, ``Refitter(engine,
logger)``, ``OnnxParserRefitter(refitter, logger).refit_from_file(onnx)``, check ``get_missing_weights()``,
``refit_cuda_engine()``, then re-serialise with the weights included (``create_serialization_config`` without
``EXCLUDE_WEIGHTS``, ``serialize_with_config``) so a stripped plan comes back whole. The ONNX must have the graph the
plan was built from; ``trtfarm.building.refit`` checks graph digests before anything gets here.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from trtfarm.errors import MismatchError, UserInputError
from trtfarm.toolchain.engine import EngineRejected, deserialize_plan
from trtfarm.toolchain.trtlog import captured_log


class RefitFailed(UserInputError):
    """The refitter refused the new weights; the message carries the parser's and the runtime's reasons."""


class RefitUnavailable(MismatchError):
    """This machine cannot refit: the engine does not deserialise here (no GPU, or a GPU the plan cannot run on).

    Neither the user's fault nor worth a retry on the same machine: the caller builds the target in full instead.
    """


def refit_plan(trt: ModuleType, plan: bytes, onnx_path: Path) -> bytes:
    """Return ``plan`` with the weights of ``onnx_path``; ``RefitUnavailable`` without a suitable GPU."""
    try:
        engine = deserialize_plan(trt, plan)
    except EngineRejected as err:
        raise RefitUnavailable(f"the engine does not load on this machine, so it cannot be refitted here: {err}") \
            from err
    if not engine.refittable:
        raise RefitFailed("the plan was built without a refit flag (REFIT, REFIT_IDENTICAL or REFIT_INDIVIDUAL)")
    with captured_log(trt) as (logger, log):
        refitter = trt.Refitter(engine, logger)
        refitter.error_recorder = log.recorder
        parser = trt.OnnxParserRefitter(refitter, logger)
        if not parser.refit_from_file(str(onnx_path)):
            errors = [parser.get_error(i).desc() for i in range(parser.num_errors)]
            why = "; ".join(errors) or "; ".join(log.errors)
            raise RefitFailed(f"{onnx_path}: the ONNX weights do not fit this engine: {why}")
        missing = list(refitter.get_missing_weights())
        if missing:
            raise RefitFailed(f"weights missing after the refit: {missing[:10]}")
        if not refitter.refit_cuda_engine():
            raise RefitFailed(f"refit_cuda_engine failed: {'; '.join(log.errors) or 'no message'}")
    config = engine.create_serialization_config()
    exclude = getattr(trt.SerializationFlag, "EXCLUDE_WEIGHTS", None)
    if exclude is not None:
        config.clear_flag(exclude)
    blob = engine.serialize_with_config(config)
    if blob is None:
        raise RefitFailed("serialize_with_config returned nothing")
    return bytes(blob)
