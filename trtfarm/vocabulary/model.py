"""The model a run builds: its bytes' content addresses and the precision step that ran before any build.

``model_source`` checks an ONNX file and digests it; ``with_precision`` runs (or reuses from the store) the precision
step and records where the converted ONNX lives, so a farm child downloads it instead of converting again.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from trtfarm import layout
from trtfarm.cachedir import work_dir
from trtfarm.errors import UserInputError, invalid_model
from trtfarm.identity import files_digest, graph_digest, model_files, sha256_file
from trtfarm.onnxfile import check_errors, check_model, load_model
from trtfarm.precision.output_record import OutputFigures
from trtfarm.precision.recipe import Recipe
from trtfarm.vocabulary.promotion import Promotion


class Accuracy(BaseModel):
    """The precision gate's record: its verdict and figures per output, each node's precision, what was normalised.

    The fields of the gate's report (``precision.gate.GateReport``), ``nodes`` (``precision.nodes``) and
    ``normalised`` (what was made right before the converters saw the model).
    """

    model_config = ConfigDict(frozen=True, extra="allow")
    mode: str = ""
    passed: bool | None = None
    thresholds: dict = {}
    figures: list[OutputFigures] = []
    failures: list[str] = []
    diverging_nodes: list[dict] = []
    note: str = ""
    warnings: list[str] = []
    nodes: dict | None = None
    normalised: list[str] = []


class PrecisionStep(BaseModel):
    """What the precision step decided: the recipe, the converted ONNX (digest, store key) and the gate's verdict."""

    model_config = ConfigDict(frozen=True)
    recipe: Recipe = Recipe()
    converted_digest: str
    converted_key: str | None = None  # store key of the converted ONNX (None: fp32, the export is built as is)
    converted_sha256: str | None = None
    pinned_fp32_nodes: list[str] = []
    accuracy: Accuracy | None = None
    gate: Literal["passed", "failed", "not_run"] = "passed"
    gate_detail: str = ""

    @property
    def mode(self) -> str:
        """The recipe's mode: fp32, fp16, bf16, int8 or fp8."""
        return self.recipe.mode


class ModelSource(BaseModel):
    """An ONNX export and its content addresses (``onnx_digest`` is what a child checks the bytes against)."""

    model_config = ConfigDict(frozen=True)
    name: str
    path: Path
    source_uri: str
    onnx_digest: str
    graph_digest: str | None  # None until ``verified``: nothing is built from a model before that
    exported_at: str
    files: tuple[tuple[str, str], ...] = ()  # (name, sha256) of the ONNX file and each external data file
    build_path: Path | None = None  # the precision-converted ONNX the builder parses (None: as exported)
    precision: PrecisionStep | None = None
    # the held-out .npz the accuracy gate and the engine check on the GPU feed (``--heldout``, farm.yaml's, else
    # heldout.npz beside the model); None: generated inputs
    heldout: Path | None = None
    # why this run's plans move no release pointer (a trial of a recipe other than the model's declared one)
    trial: str | None = None
    # farm.yaml's promotion: block: releases land in the candidate channel (None: in stable, as before)
    promotion: Promotion | None = None

    @property
    def plan_input(self) -> Path:
        """The ONNX the builder parses."""
        return self.build_path or self.path

    @property
    def plan_digest(self) -> str:
        """The digest that feeds build digests: of the converted ONNX."""
        return self.precision.converted_digest if self.precision else self.onnx_digest

    @property
    def recipe_mode(self) -> str:
        """The precision mode the plan is built in."""
        return self.precision.mode if self.precision else "fp32"


def model_source(path: Path, name: str, *, verify: bool = True) -> ModelSource:
    """Check the ONNX loads and passes ``onnx.checker``; compute its digests. Bad files are user errors.

    ``verify=False``: only what finds a published build (the files and their digests); ``onnx.checker`` and the
    graph digest wait for ``verified``, which planning calls when something is to be built from the model (an
    unverified model's file is parsed only when it may name external data files).
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: no such ONNX file")
    proto = None
    if verify:
        _bad_model_is_user_error(_check, path)  # onnx.checker's own check, without the onnx package
        proto = read_model(path)  # parsed once for its files and its graph
    layout.check_name("model name", name)
    files = _bad_model_is_user_error(lambda p: model_files(p, proto), path)
    newest = max(path.parent.joinpath(n).stat().st_mtime for n, _ in files)
    exported = datetime.fromtimestamp(newest, timezone.utc).isoformat(timespec="microseconds")
    return ModelSource(name=name, path=path, source_uri=path.resolve().as_uri(), onnx_digest=files_digest(files),
                       graph_digest=graph_digest(path, proto) if verify else None, exported_at=exported,
                       files=tuple(files))


# (path, onnx_digest) -> graph digest of the models this process checked: a local build of several compatibility
# classes runs a job per class, and each would check its model again. The onnx digest is the bytes' sha256, which
# each job confirms before it builds, so a file changed since is another key.
_CHECKED: dict[tuple[str, str], str] = {}


def verified(model: ModelSource) -> ModelSource:
    """``model`` checked by ``onnx.checker``, with its graph digest (itself when ``model_source`` did both)."""
    if model.graph_digest is not None:
        return model
    key = (str(model.path), model.onnx_digest)
    if key not in _CHECKED:
        _bad_model_is_user_error(_check, model.path)
        _CHECKED[key] = graph_digest(model.path, read_model(model.path))
    return model.model_copy(update={"graph_digest": _CHECKED[key]})


def read_model(path: Path):
    """The ONNX file parsed (external data not loaded); a file that is no ONNX model is a user error."""
    return _bad_model_is_user_error(load_model, path)


def _bad_model_is_user_error(step, path: Path):
    try:
        return step(path)
    except check_errors() as err:
        raise invalid_model(path, err) from err


def _check(path: Path) -> None:
    """``onnx.checker``'s verdict, except on an IR-3 model that is valid as TensorRT's parser reads it."""
    try:
        check_model(path)
    except check_errors():
        if not _valid_as_the_parser_reads_it(path):
            raise


def _valid_as_the_parser_reads_it(path: Path) -> bool:
    """An IR-3 model whose initializers are not all graph inputs passes once read as TensorRT's parser reads it."""
    import onnx
    from google.protobuf.message import DecodeError

    from trtfarm.precision.normalise import normalised_for_checker

    try:
        model, notes = normalised_for_checker(load_model(path))
    except (DecodeError, ValueError, OSError):  # not a model at all: the checker's own message says so
        return False
    if not notes:
        return False
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return False
    return True


def with_precision(store, model: ModelSource, recipe: Recipe, calibration: Path | None,
                   heldout: Path | None) -> ModelSource:
    """Run (or reuse from the store) the precision step; ``GateFailed`` when the gate refuses the conversion."""
    if recipe.mode == "fp32" and not recipe.auto_pin:  # used as exported: nothing to convert or gate
        step = PrecisionStep(recipe=recipe, converted_digest=model.onnx_digest,
                             gate_detail="fp32 gate passed (fp32 recipe: the model is used as exported)")
        return model.model_copy(update={"build_path": None, "precision": step, "heldout": heldout})
    from trtfarm.precision.step import precision_key, prepare_precision

    work = work_dir("converted", model.name, model.onnx_digest[:12], recipe.mode)  # the user's own, checked
    step_key = precision_key(recipe, model.onnx_digest, calibration, heldout)  # hashes the data files: once
    result = prepare_precision(store, model.name, model.path, model.onnx_digest, recipe, work,
                               calibration=calibration, heldout=heldout, key=step_key)
    converted = result.path != model.path
    key = layout.converted_prefix(model.name, model.onnx_digest, step_key)
    gate = "passed" if result.report.passed else "not_run" if result.report.passed is None else "failed"
    step = PrecisionStep(recipe=recipe, converted_digest=result.digest,
                         converted_key=layout.converted_model_key(key) if converted else None,
                         converted_sha256=sha256_file(result.path) if converted else None,
                         pinned_fp32_nodes=result.pinned,
                         accuracy=Accuracy.model_validate({
                             **result.report.to_json(), "nodes": result.nodes.to_json() if result.nodes else None,
                             "normalised": result.notes}) if recipe.mode != "fp32" else None,
                         gate=gate, gate_detail=result.summary())
    return model.model_copy(update={"build_path": result.path if converted else None, "precision": step,
                                    "heldout": heldout})
