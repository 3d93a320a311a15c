"""The store's layout: every key trtfarm reads or writes is spelled here, and only here.

```
plans/<model>/<onnx_digest:12>/<gpu>/<toolchain>-<version>/<build_digest:12>/{model.plan,manifest.json}
    .../<build_digest:12>/{provenance-<manifest_sha256:16>.json,signature-<manifest_sha256:16>.sigstore.json}
releases/<model>/<gpu>/<toolchain>-<version>.json       (the stable channel: what serving hosts pull)
candidates/<model>/<gpu>/<toolchain>-<version>.json     (the candidate channel, with farm.yaml's promotion:)
receipts/<model>/<gpu>/<toolchain>-<version>/<channel>/<plan_sha256:16>/<at>-<host>-<nonce>.json
timing-caches/<flavour>-<exact_version>/<gpu>-sm<compute_capability>/<cache_flags:12>.cache
converted/<model>/<onnx_digest:12>/<precision_step:12>/{model.onnx,report.json}
models/<model>/<export_id>/{model.onnx,farm.yaml,...,export.json}
reports/<model>/<run>/{report.md,outcomes.json,rows.json,*.png}
runs/<run>/jobs/<job_id>.json
webhook/exports/<claim>.json
status/status.html                       (the fleet's matrix, rewritten by each nightly run)
fleets/<fleet_digest>.json, fleets/current.json   (the fleet each run built for; views on a host without a fleet file)
gc/<model>/<at>-<nonce>.json             (the plan folders one `gc --apply` deleted, and why)
```
A manifest's provenance and signature are named by the manifest's own sha256: each publisher writes its pair before
its manifest, and whichever manifest wins the create-only write finds its own pair beside it.
Model names and GPU keys are path segments: ``check_name`` refuses anything that could leave its folder.
``tests/publishing/test_layout.py`` pins this layout like a file format.
The keys under no model's folder (timing caches, a run's job results, webhook claims, the status page, the
recorded fleets) are spelled beside it, in ``layout_shared.py``, with these names and roots.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from trtfarm.errors import UserInputError

PLAN_NAME, MANIFEST_NAME = "model.plan", "manifest.json"
ONNX_NAME, EXPORT_NAME = "model.onnx", "export.json"
CONVERTED_REPORT = "report.json"  # a precision step's gate report, beside its converted model.onnx
PLANS, RELEASES, TIMING_CACHES, CONVERTED, MODELS, REPORTS, RUNS, STATUS, STATE = (
    "plans", "releases", "timing-caches", "converted", "models", "reports", "runs", "status", "state")
CANDIDATES, RECEIPTS, FLEETS, GC, STATE_INDEX = "candidates", "receipts", "fleets", "gc", "state-index"
CHANNEL_ROOTS = {"stable": RELEASES, "candidate": CANDIDATES}
_PER_MODEL = frozenset({PLANS, RELEASES, CANDIDATES, RECEIPTS, CONVERTED, MODELS, REPORTS, GC})  # <root>/<model>/...
OUTCOMES_NAME = "outcomes.json"  # a run's outcomes of one model, in its report folder
PROVENANCE_PREFIX, SIGNATURE_PREFIX, SIGNATURE_SUFFIX = "provenance-", "signature-", ".sigstore.json"
TEMP_PREFIX = ".tmp-"  # in-flight writes of the file store; never a key

# One rule for every user string that becomes a key segment. ``fullmatch``, never ``match`` with ``$``: ``$`` also
# matches before a final newline, so ``"enc\n"`` would pass and publish keys that contain a newline.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")  # names plus '@' and '+' (toolchain labels, run ids)


def check_name(kind: str, value: str) -> str:
    """Accept a key component (model name, GPU key) only if it is a safe path segment."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        raise UserInputError(f"{kind} {value!r} is not a valid name: use letters, digits, '.', '_' or '-' "
                             "(at most 128, starting with a letter or digit, no '..')")
    return value


def is_name(value: object) -> bool:
    """True when ``value`` passes ``check_name`` (for callers that fall back rather than refuse)."""
    return isinstance(value, str) and bool(_NAME.fullmatch(value)) and ".." not in value


def check_segment(kind: str, value: str) -> str:
    """Accept a key segment that is not a name (a toolchain label, a run id): names plus '@' and '+'."""
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value) or ".." in value:
        raise UserInputError(f"{kind} {value!r} is not a valid key segment: use letters, digits, '.', '_', '-', "
                             "'@' or '+' (at most 128, starting with a letter or digit, no '..')")
    return value


# --- plans and releases ------------------------------------------------------------------------------------------
def plan_prefix(model: str, onnx_digest: str, gpu: str, toolchain_label: str, build_digest: str) -> str:
    """``plans/<model>/<onnx_digest:12>/<gpu>/<toolchain>-<version>/<build_digest:12>``."""
    return (f"{PLANS}/{check_name('model name', model)}/{onnx_digest[:12]}/{check_name('GPU', gpu)}/"
            f"{check_segment('toolchain', toolchain_label)}/{build_digest[:12]}")


def plan_key(prefix: str) -> str:
    """The plan object of a plan folder."""
    return f"{prefix}/{PLAN_NAME}"


def manifest_key(prefix: str) -> str:
    """The manifest of a plan folder."""
    return f"{prefix}/{MANIFEST_NAME}"


def provenance_name(manifest_sha256: str) -> str:
    """``provenance-<manifest_sha256:16>.json``: the in-toto provenance statement of the manifest with that sha256."""
    return f"{PROVENANCE_PREFIX}{manifest_sha256[:16]}.json"


def signature_name(manifest_sha256: str) -> str:
    """``signature-<manifest_sha256:16>.sigstore.json``: the bundle signing plan, manifest and provenance."""
    return f"{SIGNATURE_PREFIX}{manifest_sha256[:16]}{SIGNATURE_SUFFIX}"


def provenance_key(prefix: str, manifest_sha256: str) -> str:
    """The provenance statement of one manifest of a plan folder."""
    return f"{prefix}/{provenance_name(manifest_sha256)}"


def signature_key(prefix: str, manifest_sha256: str) -> str:
    """The signature bundle of one manifest of a plan folder."""
    return f"{prefix}/{signature_name(manifest_sha256)}"


def folder_of(key: str) -> str:
    """The plan folder (prefix) of any key in it."""
    return key.rsplit("/", 1)[0]


def leaf_of(key: str) -> str:
    """The last segment of a key: a file's name in its folder, or a folder's own name (a plan folder's build12)."""
    return key.rsplit("/", 1)[-1]


def is_attestation(name: str) -> bool:
    """True for a provenance or signature object's name (the objects named by a manifest's sha256)."""
    return name.startswith((PROVENANCE_PREFIX, SIGNATURE_PREFIX))


def plans_prefix(model: str | None = None) -> str:
    """Where every plan (of ``model``) lives, for listings."""
    return f"{PLANS}/{check_name('model name', model)}/" if model else f"{PLANS}/"


class PlanFolder(NamedTuple):
    """The fields a plan key carries."""
    model: str
    onnx12: str
    gpu: str
    toolchain: str
    build12: str
    leaf: str


def parse_plan_key(key: str) -> PlanFolder | None:
    """``plans/<model>/<onnx12>/<gpu>/<toolchain>/<build12>/<leaf>`` -> its fields; None for any other key."""
    parts = key.split("/")
    return PlanFolder(*parts[1:]) if len(parts) == 7 and parts[0] == PLANS else None


def parse_plan_prefix(prefix: str) -> PlanFolder | None:
    """A plan folder (``plan_prefix``) -> its fields, ``leaf`` empty; None for any other prefix."""
    folder = parse_plan_key(f"{prefix}/{MANIFEST_NAME}")
    return folder._replace(leaf="") if folder else None


class ShortRef(NamedTuple):
    """What ``MODEL/GPU/BUILD`` names: a model, a GPU key and a build digest's prefix."""
    model: str
    gpu: str
    build: str


def short_ref(manifest_key: str) -> str:
    """``MODEL/GPU/BUILD12`` for a manifest key: what ``trtfarm show`` takes, short enough for any table."""
    folder = parse_plan_key(manifest_key)
    return f"{folder.model}/{folder.gpu}/{folder.build12}" if folder else manifest_key


def parse_short_ref(ref: str) -> ShortRef | None:
    """``MODEL/GPU/BUILD`` -> its fields; None for anything else (a key of the store, a path)."""
    parts = ref.split("/")
    return ShortRef(*parts) if len(parts) == 3 and parts[0] != PLANS and all(parts) else None


def release_key(model: str, gpu: str, toolchain_label: str) -> str:
    """``releases/<model>/<gpu>/<toolchain>-<version>.json``."""
    return f"{RELEASES}/{check_name('model name', model)}/{check_name('GPU', gpu)}/" \
           f"{check_segment('toolchain', toolchain_label)}.json"


class ReleaseName(NamedTuple):
    """The fields a release pointer's key carries."""
    model: str
    gpu: str
    toolchain: str


def parse_release_key(key: str) -> ReleaseName | None:
    """``releases/<model>/<gpu>/<toolchain>.json`` -> (model, GPU, toolchain label); None for any other key."""
    parts = key.split("/")
    ok = len(parts) == 4 and parts[0] == RELEASES and parts[3].endswith(".json")
    return ReleaseName(parts[1], parts[2], parts[3].removesuffix(".json")) if ok else None


def channel_key(model: str, gpu: str, toolchain_label: str, channel: str = "stable") -> str:
    """The pointer of one channel: ``release_key`` for ``stable``, ``candidates/...`` for ``candidate``."""
    key = release_key(model, gpu, toolchain_label)
    if channel not in CHANNEL_ROOTS:
        raise UserInputError(f"channel {channel!r} is not a channel; use {' or '.join(CHANNEL_ROOTS)}")
    return CHANNEL_ROOTS[channel] + key.removeprefix(RELEASES)


def parse_channel_key(key: str) -> tuple[ReleaseName, str] | None:
    """A channel pointer's (model, GPU, toolchain label) and channel; None for any other key."""
    for channel, root in CHANNEL_ROOTS.items():
        if key.startswith(root + "/"):
            name = parse_release_key(RELEASES + key.removeprefix(root))
            return (name, channel) if name else None
    return None


def channel_prefix(channel: str, model: str | None = None) -> str:
    """Where every pointer of ``channel`` (of ``model``) lives."""
    return CHANNEL_ROOTS[channel] + releases_prefix(model).removeprefix(RELEASES)


def receipts_prefix(model: str | None = None, gpu: str | None = None, toolchain_label: str | None = None,
                    channel: str | None = None, plan_sha256: str | None = None) -> str:
    """Where the load receipts (of a model, narrowed by GPU, toolchain, channel and plan, in that order) live."""
    if model is None:
        return f"{RECEIPTS}/"
    parts = [RECEIPTS, check_name("model name", model)]
    for kind, value in (("GPU", gpu), ("toolchain", toolchain_label), ("channel", channel)):
        if value is None:
            return "/".join(parts) + "/"
        parts.append(check_segment(kind, value))
    if plan_sha256 is not None:
        parts.append(plan_sha256[:16])
    return "/".join(parts) + "/"


def releases_prefix(model: str | None = None) -> str:
    """Where every release pointer (of ``model``) lives."""
    return f"{RELEASES}/{check_name('model name', model)}/" if model else f"{RELEASES}/"


def parse_model(key: str) -> str | None:
    """The model a key under a per-model root names (``releases/<model>/...``, ``plans/<model>/...``); else None."""
    root, model, rest = (key.split("/", 2) + ["", ""])[:3]
    return model if root in _PER_MODEL and model and rest else None


def toolchain_label(flavour: str, version: str) -> str:
    """``tensorrt-11.4.0.106`` / ``tensorrt_rtx-1.7.1.116``: a toolchain in keys, pointers and work queues."""
    return f"{flavour}-{version}"


def parse_toolchain_label(label: str) -> tuple[str, str]:
    """``tensorrt_rtx-1.7.1.116`` -> ``("tensorrt_rtx", "1.7.1.116")``: ``toolchain_label``'s inverse."""
    return label.rpartition("-")[0], label.rpartition("-")[2]


# --- precision steps, registry, reports, state records, gc records ---------------------------------------------
def converted_prefix(model: str, onnx_digest: str, step_digest: str) -> str:
    """``converted/<model>/<onnx_digest:12>/<precision_step:12>``: a stored precision conversion and its report."""
    return f"{CONVERTED}/{check_name('model name', model)}/{onnx_digest[:12]}/{step_digest[:12]}"


def converted_model_key(prefix: str) -> str:
    """``<converted prefix>/model.onnx``: the converted ONNX of a precision step."""
    return f"{prefix}/{ONNX_NAME}"


def converted_report_key(prefix: str) -> str:
    """``<converted prefix>/report.json``: the step's gate report, digest and pinned nodes (written last)."""
    return f"{prefix}/{CONVERTED_REPORT}"


def export_prefix(model: str, export_id: str) -> str:
    """``models/<model>/<export_id>``: one registered export."""
    return f"{MODELS}/{check_name('model name', model)}/{check_segment('export id', export_id)}"


def export_file_key(prefix: str, rel: str) -> str:
    """``<export prefix>/<rel>``: one file of a registered export (``rel`` as the export folder names it)."""
    return f"{prefix}/{rel}"


def exports_prefix(model: str | None = None) -> str:
    """``models/`` or ``models/<model>/``: what to list for the registered exports."""
    return f"{MODELS}/{check_name('model name', model)}/" if model else f"{MODELS}/"


def parse_export_record_key(key: str) -> tuple[str, str] | None:
    """``(model, export_id)`` of an ``models/<model>/<export_id>/export.json`` key; None for any other key."""
    parts = key.split("/")
    return (parts[1], parts[2]) if len(parts) == 4 and parts[0] == MODELS and parts[3] == EXPORT_NAME else None


def report_key(model: str, run: str, name: str) -> str:
    """``reports/<model>/<run>/<name>``: one file of a run's report."""
    return (f"{REPORTS}/{check_name('model name', model)}/{check_segment('run', run)}/"
            f"{check_segment('report file', name)}")


def reports_prefix(model: str | None = None) -> str:
    """``reports/`` or ``reports/<model>/``: what to list for every run's reports (of ``model``)."""
    return f"{REPORTS}/{check_name('model name', model)}/" if model else f"{REPORTS}/"


def converted_models_prefix(model: str | None = None) -> str:
    """``converted/`` or ``converted/<model>/``: what to list for the stored precision steps (of ``model``)."""
    return f"{CONVERTED}/{check_name('model name', model)}/" if model else f"{CONVERTED}/"


def state_key(model: str) -> str:
    """``state/<model>.json``: the recorded state of a model's targets, which fleet views read first."""
    return f"{STATE}/{check_name('model name', model)}.json"


def state_prefix() -> str:
    """``state/``: what to list for every model's recorded state."""
    return f"{STATE}/"


def parse_state_key(key: str) -> str | None:
    """The model of a ``state/<model>.json`` key; None for any other key."""
    model = key.removeprefix(f"{STATE}/").removesuffix(".json")
    return model if key == f"{STATE}/{model}.json" and is_name(model) else None


def parse_report_key(key: str) -> tuple[str, str, str] | None:
    """``(model, run, name)`` of a ``reports/<model>/<run>/<name>`` key; None for any other key."""
    parts = key.split("/")
    return (parts[1], parts[2], parts[3]) if len(parts) == 4 and parts[0] == REPORTS else None


def gc_record_key(model: str, at: str, nonce: str) -> str:
    """``gc/<model>/<at>-<nonce>.json``: the plan folders of ``model`` one ``gc --apply`` deleted."""
    return f"{GC}/{check_name('model name', model)}/{check_segment('time', at)}-{check_segment('nonce', nonce)}.json"


def gc_prefix() -> str:
    """``gc/``: what to list for every record of deleted plans."""
    return f"{GC}/"
