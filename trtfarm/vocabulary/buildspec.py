"""``farm.yaml``: the build spec that sits beside a model export (``model.onnx``).

```yaml
name: encoder            # the model's name in the store (default: the folder name)
precision: fp16          # recipe: fp32 | fp16 | bf16 | int8 | fp8, or {mode, keep_fp32, auto_pin, task, ...}
targets: []              # target ids (default: every target of the fleet)
profiles:                # one entry per optimization profile ...
  - input_ids: 1x16:16x128:32x512
    attention_mask: {min: [1, 16], opt: [16, 128], max: [32, 512]}
# profiles: profiles.yaml   ... or a profiles file (`trtfarm profiles derive` writes one)
promotion: {receipts: 2}  # optional: releases wait in candidate until `trtfarm promote` (docs: README channels)
```
With no profiles given, a ``shapes.jsonl`` beside the model is turned into profiles (``trtfarm.profiles.derive``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trtfarm.precision.recipe import Recipe
from trtfarm.profiles.profile import Profile, load_profiles_file
from trtfarm.vocabulary.promotion import Promotion
from trtfarm.yamlfile import model_from_yaml

SPEC_NAME = "farm.yaml"
SHAPES_NAME = "shapes.jsonl"


class BuildSpec(BaseModel):
    """What to build for one model."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    precision: Recipe = Recipe()
    calibration: str | None = Field(None, description="calibration .npz (default: calib.npz beside the model)")
    heldout: str | None = Field(None, description="held-out .npz for the gate (default: heldout.npz)")
    targets: list[str] = []
    profiles: list[Profile] | str = []
    promotion: Promotion | None = Field(None, description="release to candidate and promote on evidence "
                                                          "(vocabulary/promotion.py); None: release to stable")


def spec_for_model(onnx_path: Path) -> tuple[BuildSpec, Path | None]:
    """Load ``farm.yaml`` beside the model if there is one; else an empty spec."""
    path = Path(onnx_path).with_name(SPEC_NAME)
    if not path.is_file():
        return BuildSpec(), None
    return model_from_yaml(path, BuildSpec, hint="Keys: name, precision, targets, profiles, promotion."), path


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
    from trtfarm.errors import UserInputError

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
