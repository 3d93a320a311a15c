"""A model's build spec read from its folder (``vocabulary/buildspec.py`` is the value).

``farm.yaml`` beside the export, the profiles it names (or derived from the ``shapes.jsonl`` beside it) and the
calibration and held-out files.
"""

from __future__ import annotations

from pathlib import Path

from trtfarm.errors import UserInputError
from trtfarm.precision.recipe import Recipe
from trtfarm.profiles.profile import Profile, load_profiles_file
from trtfarm.vocabulary.buildspec import SHAPES_NAME, SPEC_NAME, BuildSpec
from trtfarm.yamlfile import model_from_yaml


def spec_for_model(onnx_path: Path) -> tuple[BuildSpec, Path | None]:
    """Load ``farm.yaml`` beside the model if there is one; else an empty spec."""
    path = Path(onnx_path).with_name(SPEC_NAME)
    if not path.is_file():
        return BuildSpec(), None
    return model_from_yaml(path, BuildSpec), path  # an unknown key's line lists its block's keys (yamlfile.py)


def spec_profiles(onnx_path: Path, spec: BuildSpec) -> tuple[list[Profile], str]:
    """The spec's profiles (inline, or a file relative to farm.yaml), else derived from ``shapes.jsonl``.

    Returns the profiles and where they came from, for logs and reports.
    """
    folder = Path(onnx_path).parent
    if isinstance(spec.profiles, str):
        path = folder / spec.profiles
        return load_profiles_file(path).profiles, str(path)
    if spec.profiles:
        return spec.profiles, str(folder / SPEC_NAME)
    shapes = folder / SHAPES_NAME
    if shapes.is_file():
        from trtfarm.profiles.derive import derive_profiles, onnx_activation_bytes
        from trtfarm.profiles.shapelog import read_shape_log

        derived = derive_profiles(read_shape_log(shapes), memory=onnx_activation_bytes(onnx_path))
        return [p.profile for p in derived.profiles], f"derived from {shapes}"
    return [], "none"


def spec_precision(onnx_path: Path, spec: BuildSpec, mode: str | None = None, calibration: str | None = None,
                   heldout: str | None = None) -> tuple[Recipe, Path | None, Path | None]:
    """The recipe (``mode`` overrides its mode) and the calibration and held-out files beside the model.

    ``calibration`` and ``heldout`` (``trtfarm build --calibration/--heldout``) override farm.yaml's and the
    defaults beside the model; they are paths as given (relative to the working directory).
    """
    folder = Path(onnx_path).parent
    recipe = spec.precision.model_copy(update={"mode": mode}) if mode else spec.precision

    def find(flag: str, given_here: str | None, given: str | None, default: str) -> Path | None:
        if given_here:
            if not Path(given_here).is_file():
                raise UserInputError(f"{flag} {given_here}: no such file")
            return Path(given_here)
        path = folder / (given or default)
        if given and not path.is_file():
            raise UserInputError(f"{path}: named in farm.yaml but not there")
        return path if path.is_file() else None

    return (recipe, find("--calibration", calibration, spec.calibration, "calib.npz"),
            find("--heldout", heldout, spec.heldout, "heldout.npz"))
