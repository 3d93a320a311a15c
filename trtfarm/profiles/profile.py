"""Optimization profiles: min/opt/max shapes per dynamic input, written ``1x16:16x128:32x512``.

A profile's maximum sizes every context's activation memory, its optimum picks the timed tactics, its range decides
which requests are accepted.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, RootModel, model_validator

from trtfarm.errors import UserInputError

_SHAPE = re.compile(r"^\d+(x\d+)*$")


def parse_shape(text: str) -> list[int]:
    """``"16x128"`` -> ``[16, 128]``."""
    text = text.strip()
    if not _SHAPE.match(text):
        raise ValueError(f"shape {text!r} is not dimensions joined by 'x', e.g. 16x128")
    return [int(d) for d in text.split("x")]


def format_shape(shape: list[int]) -> str:
    """``[16, 128]`` -> ``"16x128"``."""
    return "x".join(str(d) for d in shape)


class InputRange(BaseModel):
    """The min/opt/max shapes of one input."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min: list[int]
    opt: list[int]
    max: list[int]

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        if isinstance(value, str):
            parts = value.split(":")
            if len(parts) != 3:
                raise ValueError(f"{value!r} must be MIN:OPT:MAX shapes, e.g. 1x16:16x128:32x512")
            return dict(zip(("min", "opt", "max"), (parse_shape(p) for p in parts), strict=True))
        return value

    @model_validator(mode="after")
    def _ordered(self) -> InputRange:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError(f"min/opt/max have different ranks: {self.text()}")
        if any(d < 0 for d in self.min + self.opt + self.max):
            raise ValueError(f"negative dimension in {self.text()}")
        if not all(a <= b <= c for a, b, c in zip(self.min, self.opt, self.max, strict=True)):
            raise ValueError(f"need min <= opt <= max in every dimension, got {self.text()}")
        return self

    def text(self) -> str:
        """``1x16:16x128:32x512``."""
        return ":".join(format_shape(s) for s in (self.min, self.opt, self.max))

    def contains(self, shape: list[int] | tuple[int, ...]) -> bool:
        """True when ``shape`` lies inside [min, max] in every dimension."""
        if len(shape) != len(self.min):
            return False
        return all(a <= d <= c for a, d, c in zip(self.min, shape, self.max, strict=True))


class Profile(RootModel[dict[str, InputRange]]):
    """One optimization profile: input name -> range."""

    def to_json(self) -> dict:
        """Plain JSON form, inputs in name order."""
        return {name: r.model_dump() for name, r in sorted(self.root.items())}


def profile_from_args(args: list[str]) -> Profile:
    """Parse repeated ``--profile INPUT=MIN:OPT:MAX`` into one profile."""
    ranges: dict[str, InputRange] = {}
    for arg in args:
        name, sep, spec = arg.partition("=")
        if not sep or not name:
            raise UserInputError(f"--profile {arg!r}: write INPUT=MIN:OPT:MAX, e.g. input_ids=1x16:16x128:32x512")
        if name in ranges:
            raise UserInputError(f"--profile: input {name!r} given twice; give each input once")
        try:
            ranges[name] = InputRange.model_validate(spec)
        except ValueError as err:
            raise UserInputError(f"--profile {arg!r}: {_first_error(err)}") from err
    return Profile(ranges)


def _first_error(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    return errors()[0]["msg"].removeprefix("Value error, ") if errors else str(err)


def profiles_json(profiles: list[Profile]) -> list[dict]:
    """The canonical JSON list that feeds the build digest and the manifest."""
    return [p.to_json() for p in profiles]


class ProfilesFile(BaseModel):
    """A profiles YAML: what ``trtfarm profiles derive`` writes and ``trtfarm build --profiles`` reads."""

    model_config = ConfigDict(extra="forbid")
    profiles: list[Profile]
    buckets: dict[str, list[int]] = {}
    report: dict = {}


def load_profiles_file(path) -> ProfilesFile:
    """Read a profiles YAML; errors name the file and line."""
    from pathlib import Path

    from trtfarm.yamlfile import model_from_yaml

    return model_from_yaml(Path(path), ProfilesFile, hint="A profiles file has keys profiles, buckets, report.")
