"""A Triton ``config.pbtxt`` for released plans: written from the manifest, checked by Triton's schema and rules.

The text is rendered from a ``ConfigSpec`` (the plan's I/O as the builder saw it, its optimization profiles, its
toolchain, the plan file per compute capability, the instance groups), then parsed with Triton's own ``ModelConfig``
message (``tritonclient``'s ``model_config_pb2`` through protobuf's ``text_format``, which refuses an unknown or
misspelled field), then checked against the spec and against what Triton does when it loads it: names, data types and
dims of every input and output, ``max_batch_size``, preferred batch sizes, the platform or backend that runs the
plan's toolchain, the profiles of each instance group, and the warm-ups. Only a config that passes all of it is
returned; Triton's own schema checks no dims, and loading it needs a GPU.

Which Triton backend runs a plan (``SERVED_BY``): a TensorRT plan, the ``tensorrt_plan`` platform (Triton's TensorRT
backend, which links the image's TensorRT); a TensorRT-RTX plan, the Python backend with trtfarm's loader
(``python_model``), since the TensorRT backend cannot deserialise it. Only ``tensorrt_plan`` may name profiles in an
instance group (Triton refuses ``profile`` elsewhere); a Python backend instance serves every profile.

Warm-ups: Triton runs every ``model_warmup`` sample on every instance and fails the load when one fails, and an
instance of the TensorRT backend serves only its group's profiles (the first profile when the group names none). So a
profile's warm-up (its opt shapes) is written only when every instance group has a profile that takes those shapes.

Two batching modes. ``explicit`` (the default): ``max_batch_size: 0``, the batch is the first of each tensor's
dims, as the builder saw them; Triton does not batch requests (it refuses preferred batch sizes above
``max_batch_size``), so there is no ``dynamic_batching``. ``dynamic``: the first dim is Triton's batch dim (it must be
dynamic in every tensor), ``max_batch_size`` is the smallest batch every profile accepts, and ``dynamic_batching``
lists preferred batch sizes where the profiles came from traffic.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Literal

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import TensorIO

# TensorRT DataType name -> Triton data type (FP8, INT4, FP4 have no Triton type)
TRITON_DTYPES = {"FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8",
                 "UINT8": "TYPE_UINT8", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL"}


# the plan's toolchain flavour -> how Triton serves it: a platform (TensorRT backend) or a backend
SERVED_BY = {"tensorrt": "tensorrt_plan", "tensorrt_rtx": "python"}
WIDTH = 80  # columns of the written file (a tensor name longer than that makes a longer line)


def served_by(flavour: str) -> str:
    """``tensorrt_plan`` or ``python``: how Triton serves plans of ``flavour``."""
    if flavour not in SERVED_BY:
        raise UserInputError(f"no Triton backend serves {flavour} plans; known: {', '.join(SERVED_BY)}")
    return SERVED_BY[flavour]


@dataclass(frozen=True)
class InstanceGroup:
    """One ``instance_group``: ``count`` instances on each GPU, each serving ``profiles`` (indices into the plan's)."""

    name: str
    count: int
    profiles: tuple[int, ...]


class TritonConfigRefused(UserInputError):
    """The config does not parse with Triton's schema, or does not match the plan's I/O and profiles."""


@dataclass(frozen=True)
class ConfigSpec:
    """Everything one ``config.pbtxt`` says, from the manifests of the plans it serves."""

    model: str
    io: list[TensorIO]
    profiles: list[dict]  # the manifest's build.profiles: [{input: {min, opt, max}}]
    flavour: str  # the plans' toolchain flavour: tensorrt or tensorrt_rtx (SERVED_BY)
    plan_files: dict[str, str]  # compute capability -> plan file name (tensorrt_plan; the Python backend: none)
    groups: list[InstanceGroup]
    batching: Literal["explicit", "dynamic"] = "explicit"
    preferred_batch_sizes: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # header comments: where each choice came from

    @property
    def inputs(self) -> list[TensorIO]:
        """The network's inputs, in the builder's order."""
        return [t for t in self.io if t.mode == "input"]

    @property
    def outputs(self) -> list[TensorIO]:
        """The network's outputs, in the builder's order."""
        return [t for t in self.io if t.mode == "output"]

    def max_batch_size(self) -> int:
        """0 for explicit batch dims; else the largest batch every profile accepts."""
        if self.batching == "explicit":
            return 0
        return min(r["max"][0] for p in self.profiles for r in p.values())

    def dims(self, t: TensorIO) -> list[int]:
        """The dims Triton sees: the builder's shape, without the batch dim in dynamic mode."""
        return list(t.shape) if self.batching == "explicit" else list(t.shape[1:])

    @property
    def served_by(self) -> str:
        """``tensorrt_plan`` (the platform) or ``python`` (the backend)."""
        return served_by(self.flavour)

    def takes(self, index: int, shapes: dict[str, list[int]]) -> bool:
        """Whether profile ``index`` accepts ``shapes`` (input name -> full shape) in every dim."""
        ranges = self.profiles[index]
        return all(len(s) == len(ranges[n]["min"]) and all(lo <= d <= hi for d, lo, hi in
                                                           zip(s, ranges[n]["min"], ranges[n]["max"], strict=True))
                   for n, s in shapes.items() if n in ranges)

    def warmups(self) -> list[int]:
        """The profiles whose opt-shape warm-up every instance group takes (Triton runs each on every instance)."""
        return [i for i in range(len(self.profiles))
                if all(any(self.takes(p, self.warmup_shapes(i)) for p in g.profiles) for g in self.groups)]

    def warmup_shapes(self, index: int) -> dict[str, list[int]]:
        """Every input at profile ``index``'s warm-up shape."""
        return {t.name: self.warmup_shape(index, t) for t in self.inputs}

    def warmup_shape(self, index: int, t: TensorIO) -> list[int]:
        """Input ``t`` at profile ``index``'s opt shape (a static input: its shape).

        With dynamic batching the batch is at most ``max_batch_size`` (Triton refuses a larger warm-up batch).
        """
        r = self.profiles[index].get(t.name)
        shape = list(r["opt"]) if r else list(t.shape)
        if self.batching == "dynamic":
            shape[0] = min(shape[0], self.max_batch_size())
        return shape


def triton_dtype(t: TensorIO) -> str:
    """The Triton data type of a tensor; a user error for types Triton has none of."""
    if t.dtype not in TRITON_DTYPES:
        raise UserInputError(f"tensor {t.name!r} is {t.dtype}, which Triton has no data type for; serve it with a "
                             f"{'/'.join(TRITON_DTYPES)} I/O tensor (cast at the model's edge)")
    return TRITON_DTYPES[t.dtype]


def check_batch_dim(spec: ConfigSpec) -> None:
    """Dynamic batching needs the first dim of every tensor dynamic and in every profile: else a user error."""
    fixed = [t.name for t in spec.io if not t.shape or t.shape[0] != -1]
    if fixed:
        raise UserInputError(f"--dynamic-batching: {fixed} have no dynamic first dim for Triton to batch; serve with "
                             "explicit batch dims (without --dynamic-batching)")


def _q(text: str) -> str:
    return json.dumps(text)


def _list(values) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _cc_order(item: tuple[str, str]) -> tuple[int, ...]:
    return tuple(int(x) for x in item[0].split("."))


def _block(name: str, items: list[str]) -> list[str]:
    """``name [`` items separated by commas (text format allows none after the last) ``]``."""
    return [f"{name} [", ",\n".join(items), "]"]


def _tensor(spec: ConfigSpec, t: TensorIO) -> str:
    return f"  {{ name: {_q(t.name)} data_type: {triton_dtype(t)} dims: {_list(spec.dims(t))} }}"


def _warmup(spec: ConfigSpec, index: int) -> str:
    shapes = spec.warmup_shapes(index)
    batch = 1 if spec.batching == "explicit" else min(s[0] for s in shapes.values())
    inputs = [f"    {{ key: {_q(t.name)}\n      value: {{ data_type: {triton_dtype(t)} dims: "
              f"{_list(shapes[t.name] if spec.batching == 'explicit' else shapes[t.name][1:])} zero_data: true }} }}"
              for t in spec.inputs]
    return "\n".join([f"  {{ name: \"profile-{index}-opt\" batch_size: {batch} inputs [", ",\n".join(inputs), "  ] }"])


def _group(spec: ConfigSpec, g: InstanceGroup) -> str:
    named = spec.served_by == "tensorrt_plan" and spec.profiles  # only tensorrt_plan may name profiles
    profiles = f" profile: {_list(_q(str(p)) for p in g.profiles)}" if named else ""
    return f"  {{ name: {_q(g.name)} count: {g.count} kind: KIND_GPU{profiles} }}"


def _header(notes: list[str]) -> list[str]:
    return [f"# {line}" for n in notes for line in textwrap.wrap(n, WIDTH - 2, break_on_hyphens=False)]


def render_config(spec: ConfigSpec) -> str:
    """The ``config.pbtxt`` text (not yet checked: ``config_text`` checks it)."""
    served = 'platform: "tensorrt_plan"' if spec.served_by == "tensorrt_plan" else f"backend: {_q(spec.served_by)}"
    out = _header(spec.notes) + [f"name: {_q(spec.model)}", served, f"max_batch_size: {spec.max_batch_size()}"]
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        out += _block(kind, [_tensor(spec, t) for t in tensors])
    if spec.plan_files:
        out += _block("cc_model_filenames", [f"  {{ key: {_q(cc)} value: {_q(name)} }}"
                                             for cc, name in sorted(spec.plan_files.items(), key=_cc_order)])
    out += _block("instance_group", [_group(spec, g) for g in spec.groups])
    if spec.batching == "dynamic":
        sizes = f" preferred_batch_size: {_list(spec.preferred_batch_sizes)}" if spec.preferred_batch_sizes else ""
        out += [f"dynamic_batching {{{sizes} }}"]
    warmups = spec.warmups()
    if warmups:
        out += _block("model_warmup", [_warmup(spec, i) for i in warmups])
    return "\n".join(out) + "\n"


def parse_config(text: str, source: str = "config.pbtxt"):
    """Parse with Triton's ``ModelConfig`` message; ``TritonConfigRefused`` names the line and the field."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as err:
        raise TritonConfigRefused(f"{source}: Triton's model config schema refuses it: {err}") from err


def _io_problems(spec: ConfigSpec, cfg) -> list[str]:
    from tritonclient.grpc import model_config_pb2

    problems = []
    for kind, got, want in (("input", cfg.input, spec.inputs), ("output", cfg.output, spec.outputs)):
        if [t.name for t in got] != [t.name for t in want]:
            problems.append(f"{kind}s {[t.name for t in got]} are not the plan's {[t.name for t in want]}")
            continue
        for g, w in zip(got, want, strict=True):
            dtype = model_config_pb2.DataType.Name(g.data_type)
            if dtype != triton_dtype(w):
                problems.append(f"{kind} {w.name!r} is {dtype}; the plan's is {w.dtype} ({triton_dtype(w)})")
            if list(g.dims) != spec.dims(w):
                problems.append(f"{kind} {w.name!r} has dims {list(g.dims)}; the plan's are {spec.dims(w)}")
    return problems


def _batch_problems(spec: ConfigSpec, cfg) -> list[str]:
    problems = []
    if cfg.max_batch_size != spec.max_batch_size():
        problems.append(f"max_batch_size is {cfg.max_batch_size}; the plan's profiles give {spec.max_batch_size()}")
    if cfg.HasField("dynamic_batching"):
        if cfg.max_batch_size < 1:
            problems.append("dynamic_batching needs max_batch_size >= 1 (Triton batches nothing at 0)")
        bad = [s for s in cfg.dynamic_batching.preferred_batch_size if not 1 <= s <= cfg.max_batch_size]
        if bad:
            problems.append(f"preferred_batch_size {bad} outside 1..max_batch_size {cfg.max_batch_size}")
    return problems


def _backend_problems(spec: ConfigSpec, cfg) -> list[str]:
    """The platform or backend must be the one that runs the plans' toolchain; cc_model_filenames only for TensorRT."""
    want, problems = spec.served_by, []
    if want == "tensorrt_plan":
        fits = cfg.platform == want and cfg.backend in ("", "tensorrt")
    else:
        fits = cfg.backend == want and not cfg.platform
    if not fits:
        problems.append(f"platform {cfg.platform!r} / backend {cfg.backend!r} cannot run {spec.flavour} plans; "
                        + ("platform" if want == "tensorrt_plan" else "backend") + f" {want!r} does")
    if dict(cfg.cc_model_filenames) != spec.plan_files:
        problems.append(f"cc_model_filenames {dict(cfg.cc_model_filenames)} are not the plans {spec.plan_files}")
    return problems


def served_profiles(spec: ConfigSpec, group) -> list[int]:
    """The profiles an instance of ``group`` (a parsed instance group) serves once Triton loads it.

    The TensorRT backend: the group's ``profile`` list, or the first profile when it names none. A Python backend
    instance (trtfarm's ``python_model``): every profile.
    """
    every = list(range(len(spec.profiles)))
    if spec.served_by != "tensorrt_plan":
        return every
    named = [int(p) for p in group.profile if p.isdigit() and int(p) < len(spec.profiles)]
    return named if group.profile else every[:1]


def _group_problems(spec: ConfigSpec, cfg) -> list[str]:
    from tritonclient.grpc import model_config_pb2

    problems = []
    for g in cfg.instance_group:
        if g.kind != model_config_pb2.ModelInstanceGroup.KIND_GPU:
            problems.append(f"instance group {g.name!r} is not KIND_GPU")
        if g.profile and spec.served_by != "tensorrt_plan":
            problems.append(f"instance group {g.name!r} names profiles: Triton allows that on the tensorrt_plan "
                            "platform only")
        for p in g.profile:
            if not p.isdigit() or int(p) >= len(spec.profiles):
                problems.append(f"instance group {g.name!r} names profile {p!r}; the plan has "
                                f"{len(spec.profiles)} (0..{len(spec.profiles) - 1})")
    served = sorted({p for g in cfg.instance_group for p in served_profiles(spec, g)})
    if served != list(range(len(spec.profiles))):
        problems.append(f"instance groups serve profiles {served}; each of the plan's {len(spec.profiles)} needs one")
    return problems


def _warmup_shapes(spec: ConfigSpec, w) -> dict[str, list[int]]:
    """The full shape of each input a parsed warm-up sends (with dynamic batching, its batch is batch_size)."""
    return {k: list(v.dims) if spec.batching == "explicit" else [w.batch_size, *v.dims] for k, v in w.inputs.items()}


def _refusing_groups(spec: ConfigSpec, cfg, w) -> list[str]:
    """The instance groups whose instances take none of the warm-up's shapes (Triton runs it on every instance)."""
    shapes = _warmup_shapes(spec, w)
    return [g.name for g in cfg.instance_group if not any(spec.takes(p, shapes) for p in served_profiles(spec, g))]


def _warmup_problems(spec: ConfigSpec, cfg) -> list[str]:
    problems, wanted = [], spec.warmups()
    names, expected = [w.name for w in cfg.model_warmup], [f"profile-{i}-opt" for i in wanted]
    if names != expected:
        problems.append(f"warm-ups {names}, not {expected} (the opt shapes of the profiles every group takes)")
    for w in cfg.model_warmup:
        top = max(1, cfg.max_batch_size)
        if not 1 <= w.batch_size <= top:
            problems.append(f"warm-up {w.name!r} has batch_size {w.batch_size}; Triton takes 1..{top}")
        if sorted(w.inputs) != sorted(t.name for t in spec.inputs):
            problems.append(f"warm-up {w.name!r} gives {sorted(w.inputs)}; the plan's inputs are "
                            f"{sorted(t.name for t in spec.inputs)}")
            continue
        refusing = _refusing_groups(spec, cfg, w)
        if refusing:
            problems.append(f"warm-up {w.name!r} sends shapes the instances of {refusing} do not take, and Triton "
                            "runs every warm-up on every instance (the load fails)")
        index = int(w.name.split("-")[1]) if w.name in expected else None
        for t in spec.inputs if index is not None else []:
            shape = _warmup_shapes(spec, w)[t.name]
            if shape != spec.warmup_shape(index, t):
                problems.append(f"warm-up {w.name!r} sends {t.name} {shape}; profile {index}'s opt is "
                                f"{spec.warmup_shape(index, t)}")
    return problems


def check_config(cfg, spec: ConfigSpec, source: str = "config.pbtxt") -> None:
    """Check a parsed config against the plans it serves; ``TritonConfigRefused`` lists every difference."""
    problems = [] if cfg.name == spec.model else [f"name is {cfg.name!r}, not {spec.model!r}"]
    problems += _backend_problems(spec, cfg) + _io_problems(spec, cfg) + _batch_problems(spec, cfg)
    problems += _group_problems(spec, cfg) + _warmup_problems(spec, cfg)
    if problems:
        raise TritonConfigRefused(f"{source} does not match the plan: " + "; ".join(problems))


def validated_config(text: str, spec: ConfigSpec, source: str = "config.pbtxt"):
    """Parse ``text`` with Triton's schema and check it against ``spec``; the parsed ``ModelConfig``."""
    cfg = parse_config(text, source)
    check_config(cfg, spec, source)
    return cfg


def config_text(spec: ConfigSpec) -> str:
    """Render the config and check it as ``validated_config`` does; only a config that passes is returned."""
    if spec.batching == "dynamic":
        check_batch_dim(spec)
    text = render_config(spec)
    validated_config(text, spec)
    return text
