"""The files ``trtfarm init`` writes, fitted to the project: a farm.yaml for its model, a fleet for its machine.

The templates come from the wheel. ``farm_yaml`` keeps the template's comments and sets what the model decides:
its name as a build without farm.yaml would call it (so nothing moves in the store after ``init``) and its
profiles: none for a model whose inputs are all static, a commented example naming each dynamic input otherwise
(trtfarm never invents a traffic range; the example's shared dimensions agree, so uncommented it builds), and the
template's examples left commented with no model.
``fleet_yaml`` adds to the fleet template the GPUs, toolchains and targets of this machine's built-in fleet that
the template lacks, so a plan built before ``init`` keeps its target id, keys and ``reproduce`` command after it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from trtfarm.identity import model_name_from_path
from trtfarm.onnxfile import InputDims, onnx_inputs
from trtfarm.vocabulary.fleet import Fleet

PROFILES_START = "# One entry per optimization profile"  # the template's profiles section runs from here to the end
EXAMPLE_DIMS = ((1, 8, 32), (16, 128, 512))  # a commented example's batch (min, opt, max), then its other dims


def _examples(inputs: dict[str, InputDims]) -> dict[str, str]:
    """``MIN:OPT:MAX`` per input, its static dims kept and example sizes in its dynamic ones, shared ones agreeing.

    A named dimension has one range wherever it appears (``batch`` in ``input_ids`` and ``attention_mask``). An
    input's first dynamic dimension is taken as the batch, wherever it stands (silero-vad's ``state [2, ?, 128]``
    shares the batch of ``input [?, ?]``, unnamed in both), its others as sequences; a name takes the range of the
    place it is first met.
    """
    named: dict[str, tuple[int, int, int]] = {}
    found = {}
    for name, dims in inputs.items():
        if dims is None:
            found[name] = "MIN:OPT:MAX"
            continue
        sizes: list[tuple[int, ...]] = []
        for d in dims:
            if isinstance(d, int):
                sizes.append((d, d, d))
                continue
            guess = EXAMPLE_DIMS[0 if all(isinstance(s, int) for s in dims[:len(sizes)]) else 1]
            sizes.append(named.setdefault(d, guess) if d else guess)
        found[name] = ":".join("x".join(str(s[k]) for s in sizes) or "1" for k in range(3))
    return found


def _shape(dims: InputDims) -> str:
    if dims is None:
        return "rank unknown"
    return "x".join(str(d) if isinstance(d, int) else (d or "?") for d in dims) or "scalar"


def profiles_section(model: Path | None) -> str:
    """The farm.yaml profiles section for ``model`` (None: commented examples)."""
    head = ("# One entry per optimization profile: INPUT: MIN:OPT:MAX, each shape written 1x16 (one per dynamic "
            "input).\n")
    if model is None:
        return head + ("# Leave profiles out for a model with static shapes; with a shapes.jsonl beside the model "
                       "they are\n# derived from it. For example:\n# profiles:\n"
                       "#   - input_ids: 1x16:16x128:32x512\n#     attention_mask: 1x16:16x128:32x512\n"
                       "# profiles: profiles.yaml      # ... or a file that `trtfarm profiles derive` wrote\n")
    inputs = onnx_inputs(model)
    dynamic = {n: d for n, d in inputs.items() if d is None or any(not isinstance(x, int) for x in d)}
    listed = ", ".join(f"{n} ({_shape(d)})" for n, d in inputs.items()) or "none"
    if not dynamic:
        return head + f"# {model.name}'s inputs are all static ({listed}): it needs no profiles.\n"
    lines = [f"# {model.name}'s dynamic inputs: {', '.join(f'{n} ({_shape(d)})' for n, d in dynamic.items())}.",
             "# Give each a range that covers your traffic (the sizes below are examples: edit them, then uncomment),",
             "# or put a shapes.jsonl of logged request shapes beside the model to derive them from it:",
             "# profiles:"]
    examples = _examples(dynamic)
    for i, name in enumerate(dynamic):
        lines.append(f"#   {'- ' if i == 0 else '  '}{name}: {examples[name]}")
    lines.append("# profiles: profiles.yaml      # ... or a file that `trtfarm profiles derive` wrote")
    return head + "\n".join(lines) + "\n"


def farm_yaml(template: str, model: Path | None) -> str:
    """The farm.yaml template fitted to ``model`` (its name and profiles), or with examples only (None)."""
    text = template.split(PROFILES_START, 1)[0]
    if model is not None:
        text = re.sub(r"^name: \S+", f"name: {model_name_from_path(model)}", text, count=1, flags=re.M)
    return text + profiles_section(model)


def _toolchain_block(key: str, fleet: Fleet) -> str:
    t = fleet.toolchains[key]
    return f"  {key}:\n    flavour: {t.flavour.value}\n    version: \"{t.version}\"\n"


def _gpu_block(key: str, fleet: Fleet) -> str:
    g = fleet.gpus[key]
    return (f"  {key}:                       # this machine's (NVML), added by `trtfarm init`\n"
            f"    nvml_name: \"{g.nvml_name}\"\n"
            + (f"    pci_ids: {json.dumps(g.pci_ids)}\n" if g.pci_ids else "")
            + (f"    mig: {g.mig}\n" if g.mig else "")
            + f"    compute_capability: \"{g.compute_capability}\"\n"
            f"    memory_gib: {g.memory_gib:g}\n    pool: {g.pool}\n    count: {g.count}\n")


def _before_section(template: str, section: str, block: str) -> str:
    """``template`` with ``block`` (entries of the section above) put before ``section`` and the comments over it."""
    lines = template.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.rstrip() == section)
    while at > 0 and (not lines[at - 1].strip() or lines[at - 1].startswith("#")):
        at -= 1  # the blank lines and comments that introduce the section stay with it
    return "".join(lines[:at]) + block + "".join(lines[at:])


def fleet_yaml(template: str, template_fleet: Fleet, machine: Fleet) -> str:
    """The fleet template with this machine's GPUs, toolchains and targets that it lacks, under the same names."""
    toolchains = [k for k in machine.toolchains if k not in template_fleet.toolchains]
    gpus = [k for k in machine.gpus if k not in template_fleet.gpus]
    known = {t.id for t in template_fleet.targets}
    targets = [t for t in machine.targets if t.id not in known]
    if toolchains:
        template = _before_section(template, "gpus:", "".join(_toolchain_block(k, machine) for k in toolchains))
    if gpus:
        template = _before_section(template, "defaults:", "".join(_gpu_block(k, machine) for k in gpus))
    for t in targets:
        extra = ", release_on: built" if t.release_on == "built" else ""
        template = template.rstrip("\n") + f"\n  - {{id: {t.id}, gpu: {t.gpu}, toolchain: {t.toolchain}{extra}}}" \
                                           "   # this machine's\n"
    return template
