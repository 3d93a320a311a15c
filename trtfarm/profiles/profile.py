"""Optimization profiles: min/opt/max shapes per dynamic input, written ``1x16:16x128:32x512``.

A profile's maximum sizes every context's activation memory, its optimum picks the timed tactics, its range decides
which requests are accepted. Every dimension is at least 1. ``check_profiles_against_inputs`` checks profiles against
the model's inputs (``onnxfile.onnx_inputs`` reads them) before anything is built, so a wrong name or rank costs no
build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, RootModel, field_validator, model_validator

from trtfarm.errors import UserInputError
from trtfarm.onnxfile import InputDims, onnx_inputs  # noqa: F401 - the one ONNX reader; planning reads here
from trtfarm.onnxshapes import onnx_shape_tensors  # noqa: F401 - planning reads here

_SHAPE = re.compile(r"^\d+(x\d+)*$")
MAX_DIM = 2**31 - 1  # the largest dimension a TensorRT profile takes (its Python bindings pass dims as int32)


def parse_shape(text: str) -> list[int]:
    """``"16x128"`` -> ``[16, 128]``."""
    text = text.strip()
    if not _SHAPE.fullmatch(text):
        raise ValueError(f"shape {text!r} is not dimensions joined by 'x', e.g. 16x128")
    return [int(d) for d in text.split("x")]


def format_shape(shape: list[int]) -> str:
    """``[16, 128]`` -> ``"16x128"``."""
    return "x".join(str(d) for d in shape)


def parse_values(text: str) -> list[int]:
    """``"1,4"`` or ``"[1,4]"`` -> ``[1, 4]``: a shape tensor's values (``[3]`` for a single one)."""
    text = text.strip().removeprefix("[").removesuffix("]")
    try:
        return [int(v) for v in text.split(",") if v.strip()] or _no_values(text)
    except ValueError:
        raise ValueError(f"values {text!r} are not integers joined by ',', e.g. 1,4 (or [3] for one value)") from None


def _no_values(text: str) -> list[int]:
    raise ValueError(f"values {text!r}: give at least one integer, e.g. 1,4")


class InputRange(BaseModel):
    """The min/opt/max shapes of one input, or, for a shape tensor (``values``), the min/opt/max of its values.

    Shapes are written ``1x16:16x128:32x512``; a shape tensor's values ``1,4:3,4:3,4`` (or ``[1,4]:[3,4]:[3,4]``,
    ``[3]:[5]:[8]`` for one value), as TensorRT's ``set_shape_input`` takes them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    min: list[int]
    opt: list[int]
    max: list[int]
    values: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        if isinstance(value, str):
            parts = value.split(":")
            if len(parts) != 3:
                raise ValueError(f"{value!r} must be MIN:OPT:MAX shapes, e.g. 1x16:16x128:32x512 (a shape tensor's "
                                 "values: 1,4:3,4:3,4)")
            values = any("," in p or "[" in p for p in parts)
            parse = parse_values if values else parse_shape
            return {**dict(zip(("min", "opt", "max"), (parse(p) for p in parts), strict=True)), "values": values}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> InputRange:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError(f"min/opt/max have different {'lengths' if self.values else 'ranks'}: {self.text()}")
        if self.values:
            if not all(a <= b <= c for a, b, c in zip(self.min, self.opt, self.max, strict=True)):
                raise ValueError(f"need min <= opt <= max for every value, got {self.text()}")
            return self
        if any(d < 1 for d in self.min + self.opt + self.max):
            raise ValueError(f"{self.text()} has a dimension below 1; every dimension must be at least 1")
        big = max(self.min + self.opt + self.max, default=0)
        if big > MAX_DIM:
            raise ValueError(f"{self.text()} has the dimension {big}, beyond the largest TensorRT builds "
                             f"({MAX_DIM}); give a realistic maximum")
        if not all(a <= b <= c for a, b, c in zip(self.min, self.opt, self.max, strict=True)):
            raise ValueError(f"need min <= opt <= max in every dimension, got {self.text()}")
        return self

    def text(self) -> str:
        """``1x16:16x128:32x512``, or a shape tensor's values ``1,4:3,4:3,4`` (``[3]:[5]:[8]`` for one value)."""
        if self.values:
            return ":".join(",".join(map(str, v)) if len(v) > 1 else f"[{v[0]}]"
                            for v in (self.min, self.opt, self.max))
        return ":".join(format_shape(s) for s in (self.min, self.opt, self.max))

    def contains(self, shape: list[int] | tuple[int, ...]) -> bool:
        """True when ``shape`` lies inside [min, max] in every dimension."""
        if len(shape) != len(self.min):
            return False
        return all(a <= d <= c for a, d, c in zip(self.min, shape, self.max, strict=True))


class Profile(RootModel[dict[str, InputRange]]):
    """One optimization profile: input name -> range."""

    def to_json(self) -> dict:
        """Plain JSON form, inputs in name order (``values`` only for a shape tensor's range)."""
        return {name: r.model_dump(exclude_defaults=True) for name, r in sorted(self.root.items())}


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

    @field_validator("profiles")
    @classmethod
    def _not_empty(cls, value: list[Profile]) -> list[Profile]:
        if not value:
            raise ValueError("no profiles: give at least one (INPUT: MIN:OPT:MAX per dynamic input), or leave out "
                             "--profiles to use farm.yaml's")
        return value


def load_profiles_file(path) -> ProfilesFile:
    """Read a profiles YAML; errors name the file and line (a key given twice included)."""
    from trtfarm.yamlfile import model_from_yaml

    return model_from_yaml(Path(path), ProfilesFile, hint="A profiles file has keys profiles, buckets, report.")


def profile_texts(profiles: list[Profile]) -> list[dict[str, str]]:
    """Profiles as text (``{"input_ids": "1x16:16x128:32x512"}`` each): the form requests and flags carry."""
    return [{name: r.text() for name, r in p.root.items()} for p in profiles]


# --- profiles against the model's inputs ---------------------------------------------------------------------------



def _fixed(d: int | str | None) -> int | None:
    return d if isinstance(d, int) else None


def _shape_text(dims: InputDims) -> str:
    return "rank unknown" if dims is None else "x".join(str(d) if isinstance(d, int) else "?" for d in dims) or "scalar"


def _values_problems(i: int, name: str, r: InputRange, dims: InputDims, shaping: str | None) -> list[str]:
    """A shape tensor's profile gives its values (as many as it holds); any other input's gives shapes."""
    where = f"profile {i}, input {name!r}"
    if shaping is None and r.values:
        return [f"{where}: {r.text()} gives values, but {name!r} is not a shape tensor; give its shapes "
                "MIN:OPT:MAX, e.g. 1x16:16x128:32x512"]
    if shaping is None:
        return []
    example = ":".join([",".join(["1"] * (dims[0] if dims and isinstance(dims[0], int) else 1))] * 3)
    if not r.values:
        return [f"{where}: {name!r} is a shape tensor ({shaping}), so its profile gives its values, not a shape; "
                f"write them with commas, e.g. --profile {name}={example}"]
    count = 1 if not dims else dims[0] if isinstance(dims[0], int) else None
    if count is not None and len(r.min) != count:
        return [f"{where}: {r.text()} gives {len(r.min)} value(s), but {name!r} holds {count}; e.g. "
                f"--profile {name}={example}"]
    return []


def _range_problems(i: int, name: str, r: InputRange, dims: InputDims) -> list[str]:
    if dims is None or r.values:
        return []
    where = f"profile {i}, input {name!r}"
    if len(r.min) != len(dims):
        return [f"{where}: {r.text()} has {len(r.min)} dimensions but the model's input has {len(dims)} "
                f"({_shape_text(dims)}); give {len(dims)} dimensions"]
    return [f"{where}: dimension {d} is fixed at {fixed} in the model ({_shape_text(dims)}) but the profile gives "
            f"{r.min[d]}:{r.opt[d]}:{r.max[d]}; use {fixed} there"
            for d, fixed in enumerate(map(_fixed, dims))
            if fixed is not None and not r.min[d] == r.opt[d] == r.max[d] == fixed]


def _named_dim_problems(i: int, profile: Profile, inputs: Mapping[str, InputDims]) -> list[str]:
    """Dimensions that share one name are one size to TensorRT: their ``opt`` values must agree.

    TensorRT's builder refuses such a profile ("Dimensions with name X must be equal"); it accepts different min
    or max values, so only ``opt`` is checked here.
    """
    seen: dict[str, tuple[str, int, int]] = {}
    problems = []
    for name, r in profile.root.items():
        dims = inputs.get(name)
        if dims is None or len(dims) != len(r.opt) or r.values:
            continue
        for d, label in enumerate(dims):
            if not isinstance(label, str):
                continue
            first = seen.setdefault(label, (name, d, r.opt[d]))
            if first[2] != r.opt[d]:
                where = f"dimension {first[1]}" + ("" if first[0] == name else f" of input {first[0]!r}")
                problems.append(
                    f"profile {i}, input {name!r}: dimension {d} and {where} are both named {label!r} in the "
                    f"model, so TensorRT takes them as one size (its builder: \"Dimensions with name {label} must "
                    f"be equal\"), but the profile's opt gives {r.opt[d]} and {first[2]}; give them the same opt, or "
                    "give the dimensions distinct names in the export")
    return problems


def check_profiles_against_inputs(profiles: list[Profile], inputs: Mapping[str, InputDims],
                                  model: str = "the model", shape_tensors: Mapping[str, str] | None = None) -> None:
    """Refuse profiles that cannot build: unknown input names, dynamic inputs left out, wrong ranks, static dims.

    ``inputs`` maps each graph input to its dims (``onnx_inputs`` reads them); ``shape_tensors`` names the inputs
    whose values are shapes (``onnx_shape_tensors``) and what they shape: their profiles give values, and every
    profile needs them, as every profile needs every dynamic input. No profiles is right only for a model whose
    inputs are all static. Raises ``UserInputError``: one line naming each input and the fix.
    """
    shape_tensors = shape_tensors or {}
    if shape_tensors and not profiles:
        named = ", ".join(f"{n!r} ({what})" for n, what in shape_tensors.items())
        raise UserInputError(f"{model}: input(s) {named} are shape tensors: TensorRT needs the min/opt/max of their "
                             f"values in an optimization profile; add --profile NAME=MIN:OPT:MAX values, e.g. "
                             f"--profile {next(iter(shape_tensors))}=1,4:3,4:3,4 (or profiles: in farm.yaml)")
    problems = []
    dynamic = [n for n, dims in inputs.items() if dims is None or any(_fixed(d) is None for d in dims)]
    if dynamic and not profiles:
        shapes = ", ".join(f"{n!r} ({_shape_text(inputs[n])})" for n in dynamic)
        example = " ".join(f"--profile {n}=MIN:OPT:MAX" for n in dynamic)
        raise UserInputError(f"{model}: no profile for its dynamic input{'s' * (len(dynamic) > 1)} {shapes}; give "
                             f"{example}, profiles in farm.yaml beside the model (`trtfarm init` writes one "
                             "that names them), or a shapes.jsonl of logged request shapes beside it")
    dynamic += [n for n in shape_tensors if n not in dynamic]
    for i, profile in enumerate(profiles):
        for name, r in profile.root.items():
            if name not in inputs:
                problems.append(f"profile {i}: {name!r} is not an input of {model} (its inputs: "
                                f"{', '.join(inputs) or 'none'}); fix the name in --profile or the profiles file")
            else:
                problems += _values_problems(i, name, r, inputs[name], shape_tensors.get(name))
                problems += _range_problems(i, name, r, inputs[name])
        problems += _named_dim_problems(i, profile, inputs)
        problems += [f"profile {i}: no range for dynamic input {name!r} ({_shape_text(inputs[name])}); add "
                     f"--profile {name}=MIN:OPT:MAX (every profile needs every dynamic input)"
                     for name in dynamic if name not in profile.root and name not in shape_tensors]
        problems += [f"profile {i}: no values for shape tensor input {name!r} ({what}); add --profile "
                     f"{name}=MIN:OPT:MAX values, e.g. {name}=1,4:3,4:3,4 (every profile needs every shape tensor)"
                     for name, what in shape_tensors.items() if name not in profile.root]
    if problems:
        raise UserInputError("; ".join(problems))
