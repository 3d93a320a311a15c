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
The value and its validation only: ``project/spec_file.py`` reads it, and the profiles and data files beside it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trtfarm.precision.recipe import Recipe
from trtfarm.profiles.profile import Profile
from trtfarm.vocabulary.promotion import Promotion

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
