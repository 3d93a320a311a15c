"""An export's ONNX file checked and digested: what a run builds from, before any precision step.

``model_source`` checks an ONNX file (``onnx.checker``) and computes its content addresses; ``verified`` checks a
model that was digested only, once per process. Planning, the builder (beside TensorRT's build) and the registry
share them; the values they return (``vocabulary.model.ModelSource``) only name.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from trtfarm import layout
from trtfarm.errors import UserInputError, invalid_model
from trtfarm.identity import files_digest, graph_digest, model_files
from trtfarm.onnxfile import check_errors, check_model, load_model
from trtfarm.vocabulary.model import ModelSource


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
