"""A Triton ``config.pbtxt`` for released TensorRT plans: written from the manifest, checked by Triton's schema.

The text is rendered from a ``ConfigSpec`` (the plan's I/O as the builder saw it, its optimization profiles, the plan
file per compute capability, instances per profile), then parsed with Triton's own ``ModelConfig`` message
(``tritonclient``'s ``model_config_pb2`` through protobuf's ``text_format``, which refuses an unknown or misspelled
field), then checked against the spec: names, data types and dims of every input and output, ``max_batch_size``,
preferred batch sizes, one instance group per profile, and each warm-up shape inside its profile. Only a config
that passes all of it is returned; Triton's own schema checks no dims, and loading it needs a GPU.

Two batching modes. ``explicit`` (the default): ``max_batch_size: 0``, the batch is the first of each tensor's
dims, as the builder saw them; Triton does not batch requests (it refuses preferred batch sizes above
``max_batch_size``), so there is no ``dynamic_batching``. ``dynamic``: the first dim is Triton's batch dim (it must be
dynamic in every tensor), ``max_batch_size`` is the smallest batch every profile accepts, and ``dynamic_batching``
lists preferred batch sizes where the profiles came from traffic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from trtfarm.errors import UserInputError
from trtfarm.vocabulary.manifest import TensorIO

# TensorRT DataType name -> Triton data type (FP8, INT4, FP4 have no Triton type)
TRITON_DTYPES = {"FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8",
                 "UINT8": "TYPE_UINT8", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL"}


class TritonConfigRefused(UserInputError):
    """The config does not parse with Triton's schema, or does not match the plan's I/O and profiles."""


@dataclass(frozen=True)
class ConfigSpec:
    """Everything one ``config.pbtxt`` says, from the manifests of the plans it serves."""

    model: str
    io: list[TensorIO]
    profiles: list[dict]  # the manifest's build.profiles: [{input: {min, opt, max}}]
    plan_files: dict[str, str]  # compute capability -> plan file name in each version folder
    instances: list[int]  # per profile
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
    shapes = {t.name: spec.warmup_shape(index, t) for t in spec.inputs}
    batch = 1 if spec.batching == "explicit" else min(s[0] for s in shapes.values())
    inputs = [f"    {{ key: {_q(t.name)} value: {{ data_type: {triton_dtype(t)} dims: "
              f"{_list(shapes[t.name] if spec.batching == 'explicit' else shapes[t.name][1:])} zero_data: true }} }}"
              for t in spec.inputs]
    return "\n".join([f"  {{ name: \"profile-{index}-opt\" batch_size: {batch} inputs [", ",\n".join(inputs), "  ] }"])


def render_config(spec: ConfigSpec) -> str:
    """The ``config.pbtxt`` text (not yet checked: ``config_text`` checks it)."""
    out = [f"# {n}" for n in spec.notes]
    out += [f"name: {_q(spec.model)}", "platform: \"tensorrt_plan\"", f"max_batch_size: {spec.max_batch_size()}"]
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        out += _block(kind, [_tensor(spec, t) for t in tensors])
    out += _block("cc_model_filenames", [f"  {{ key: {_q(cc)} value: {_q(name)} }}"
                                         for cc, name in sorted(spec.plan_files.items(), key=_cc_order)])
    out += _block("instance_group", [f"  {{ name: \"profile-{i}\" count: {n} kind: KIND_GPU profile: [ \"{i}\" ] }}"
                                     for i, n in enumerate(spec.instances)])
    if spec.batching == "dynamic":
        sizes = f" preferred_batch_size: {_list(spec.preferred_batch_sizes)}" if spec.preferred_batch_sizes else ""
        out += [f"dynamic_batching {{{sizes} }}"]
    out += _block("model_warmup", [_warmup(spec, i) for i in range(len(spec.profiles))])
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


def _group_problems(spec: ConfigSpec, cfg) -> list[str]:
    from tritonclient.grpc import model_config_pb2

    problems, seen = [], []
    for g in cfg.instance_group:
        if g.kind != model_config_pb2.ModelInstanceGroup.KIND_GPU:
            problems.append(f"instance group {g.name!r} is not KIND_GPU")
        for p in g.profile:
            if not p.isdigit() or int(p) >= len(spec.profiles):
                problems.append(f"instance group {g.name!r} names profile {p!r}; the plan has "
                                f"{len(spec.profiles)} (0..{len(spec.profiles) - 1})")
            seen.append(p)
    if sorted(seen) != sorted(str(i) for i in range(len(spec.profiles))):
        problems.append(f"instance groups serve profiles {seen}; each of the plan's {len(spec.profiles)} needs one")
    return problems


def _warmup_problems(spec: ConfigSpec, cfg) -> list[str]:
    problems = []
    if len(cfg.model_warmup) != len(spec.profiles):
        problems.append(f"{len(cfg.model_warmup)} warm-up requests for {len(spec.profiles)} profiles")
    for i, w in enumerate(cfg.model_warmup[: len(spec.profiles)]):
        top = max(1, cfg.max_batch_size)
        if not 1 <= w.batch_size <= top:
            problems.append(f"warm-up {w.name!r} has batch_size {w.batch_size}; Triton takes 1..{top}")
        if sorted(w.inputs) != sorted(t.name for t in spec.inputs):
            problems.append(f"warm-up {w.name!r} gives {sorted(w.inputs)}; the plan's inputs are "
                            f"{sorted(t.name for t in spec.inputs)}")
            continue
        for t in spec.inputs:
            dims = list(w.inputs[t.name].dims)
            shape = dims if spec.batching == "explicit" else [w.batch_size, *dims]
            if shape != spec.warmup_shape(i, t):
                problems.append(f"warm-up {w.name!r} sends {t.name} {shape}; profile {i}'s opt is "
                                f"{spec.warmup_shape(i, t)}")
    return problems


def check_config(cfg, spec: ConfigSpec, source: str = "config.pbtxt") -> None:
    """Check a parsed config against the plans it serves; ``TritonConfigRefused`` lists every difference."""
    problems = [] if cfg.name == spec.model else [f"name is {cfg.name!r}, not {spec.model!r}"]
    if cfg.platform != "tensorrt_plan":
        problems.append(f"platform is {cfg.platform!r}, not \"tensorrt_plan\"")
    problems += _io_problems(spec, cfg) + _batch_problems(spec, cfg) + _group_problems(spec, cfg)
    problems += _warmup_problems(spec, cfg)
    if dict(cfg.cc_model_filenames) != spec.plan_files:
        problems.append(f"cc_model_filenames {dict(cfg.cc_model_filenames)} are not the plans {spec.plan_files}")
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
