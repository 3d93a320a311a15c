"""What each model's next build would start from: its export, recipe, converted ONNX and profiles, read only.

For a registered model that is its newest export (or the one a run names): the digests registration recorded, and
its build spec (``farm.yaml``), fetched without the model and kept per export id on this machine. For a model built
without registering it (``trtfarm build model.onnx``), it is the export its newest released plan was built from, as
that manifest records it. Either way ``ExpectedExport.digest`` gives the build digest a target would get, exactly as
a run computes it (``identity.build_digest``), or says why it cannot be known before the run (a precision step that
has not run yet).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path

from trtfarm import layout
from trtfarm.errors import CorruptObject, IntegrityError, UserInputError
from trtfarm.identity import build_digest_of, model_digest_part, target_digest_part
from trtfarm.state.summaries import ManifestSummary, SpecSummary
from trtfarm.state.survey import READ_THREADS, StoreSurvey
from trtfarm.store.base import side_by_side
from trtfarm.vocabulary.exports import ExportRecord, ExportRef
from trtfarm.vocabulary.fleet import ResolvedTarget


@dataclass(frozen=True)
class ExpectedExport:
    """The export a model's next build starts from, and what its build digests are made of."""

    model: str
    onnx_digest: str
    recipe: str
    converted_digest: str | None  # None: the precision step has not run (``unknown`` says so)
    profiles: list[dict] | None
    export_id: str | None = None  # None: not a registered export
    registered_at: str | None = None
    targets: tuple[str, ...] | None = None  # farm.yaml's target ids (None: every target of the fleet)
    size_bytes: int | None = None  # the ONNX and its external data
    unknown: str | None = None  # why no build digest can be computed before a run
    damaged: str | None = None  # the export's record is not what trtfarm wrote (what is wrong, and the fix)
    channel: str = "stable"  # where its releases go: candidate when farm.yaml declares promotion:

    def to_record(self) -> dict:
        """The fields as a state record keeps them (``from_record`` reads them back)."""
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**doc, "targets": list(self.targets) if self.targets is not None else None}

    @classmethod
    def from_record(cls, doc: dict) -> ExpectedExport:
        """The export a state record kept (``TypeError`` when the record holds other fields)."""
        targets = doc.get("targets")
        return cls(**{**doc, "targets": tuple(targets) if targets is not None else None})

    @property
    def label(self) -> str:
        """The export as people name it: its id, else its onnx digest's first 12."""
        return self.export_id or f"onnx {self.onnx_digest[:12]}"

    def covers(self, target_id: str) -> bool:
        """True when the model builds for this target (farm.yaml's ``targets``, else every one)."""
        return self.targets is None or target_id in self.targets

    @cached_property
    def _digest_part(self) -> bytes | None:
        if self.converted_digest is None or self.profiles is None:
            return None
        return model_digest_part(self.converted_digest, self.profiles)

    def digest(self, target: ResolvedTarget, part: tuple[bytes, bytes] | None = None) -> str | None:
        """The build digest ``target`` would get, as a run computes it (``part``: its ``digest_part``, if kept)."""
        if self._digest_part is None:
            return None
        return build_digest_of(self._digest_part, part or digest_part(target))

    def prefix(self, target: ResolvedTarget, digest: str) -> str:
        """The plan folder of ``target``'s build of this export."""
        return layout.plan_prefix(self.model, self.onnx_digest, target.gpu_key, target.toolchain_label, digest)


def digest_part(target: ResolvedTarget) -> tuple[bytes, bytes]:
    """The target's half of its build digests (``identity.target_digest_part``)."""
    return target_digest_part(target.settings.model_dump(mode="json"), target.toolchain.flavour.value,
                              target.toolchain.version, target.compat_class)


def expected_exports(survey: StoreSurvey, models: list[str], precision: str | None = None,
                     refs: dict[str, ExportRef] | None = None) -> dict[str, ExpectedExport]:
    """Each model's next build: its newest registered export (or ``refs[model]``), else its newest released plan."""
    refs = dict(refs or {})
    registered = [m for m in models if m not in refs and survey.exports.get(m)]
    named = {m: r.export_id for m, r in refs.items() if r.export_id}  # name@export_id, or a registered name
    records = survey.records([*registered, *named], named)
    for m in registered:
        export_id, _ = survey.exports[m][-1]
        refs[m] = ExportRef(survey.store.url(layout.export_prefix(m, export_id)), m, export_id)
    with side_by_side(survey.store, READ_THREADS) as pool:
        found = dict(zip(refs, pool.map(lambda m: _from_export(survey, refs[m], records.get(m), precision), refs),
                         strict=True))
    rest = [m for m in models if m not in found]
    found.update(_from_releases(survey, rest))
    return found


def _spec(survey: StoreSurvey, ref: ExportRef, record: ExportRecord, cache_key: str | None) -> SpecSummary:
    """The export's build spec as planning reads it: fetched without the model, kept per immutable export."""
    from trtfarm.profiles.profile import profiles_json
    from trtfarm.project.spec_file import spec_for_model, spec_profiles
    from trtfarm.publishing.registry import fetch_export, fetch_folder, local_copy
    from trtfarm.vocabulary.buildspec import SHAPES_NAME

    if cache_key:
        cached = survey.cache.get("spec", cache_key, record.export_id, SpecSummary)
        if cached is not None:
            return cached
    folder = fetch_folder(ref, "specs")
    spec = _inline_spec(survey, ref, record, folder)
    if spec is None:  # anything but an export of farm.yaml alone, read and valid: fetched as a run fetches it
        path = fetch_export(ref, folder, spec_only=True, record=record)
        spec, _ = spec_for_model(path)
    else:
        path = folder / layout.ONNX_NAME
    if isinstance(spec.profiles, str) or spec.profiles:
        profiles = profiles_json(spec_profiles(path, spec)[0])
    elif SHAPES_NAME in record.files:  # derived from the shape log: the derivation needs the model
        profiles = profiles_json(spec_profiles(local_copy(ref, record), spec)[0])
    else:
        profiles = []
    calibration = spec.calibration or ("calib.npz" if "calib.npz" in record.files else None)
    heldout = spec.heldout or ("heldout.npz" if "heldout.npz" in record.files else None)
    summary = SpecSummary(recipe=spec.precision.model_dump(mode="json"), profiles=profiles, targets=spec.targets,
                          calibration=calibration, heldout=heldout, promotion=spec.promotion is not None)
    if cache_key:
        survey.cache.put("spec", cache_key, record.export_id, summary)
    return summary


def _inline_spec(survey: StoreSurvey, ref: ExportRef, record: ExportRecord, folder: Path):
    """The export's ``BuildSpec`` read in one GET, when farm.yaml is the only file planning would fetch.

    Its bytes are checked against the record's sha256 (a copy fetched before is read instead). None for any other
    export, and for a farm.yaml missing, damaged or invalid: the caller fetches it and says what is wrong, as before.
    """
    import hashlib

    from trtfarm.publishing.registry import HEAVY_FILES
    from trtfarm.vocabulary.buildspec import SPEC_NAME, BuildSpec
    from trtfarm.yamlfile import model_from_yaml

    heavy = {*HEAVY_FILES, *(record.model_files or [])}
    light = [n for n in record.files if n not in heavy]
    prefix = layout.export_prefix(ref.name, ref.export_id) if ref.export_id else None
    if light != [SPEC_NAME] or layout.ONNX_NAME not in record.files or ref.uri != survey.store.url(prefix or ""):
        return None  # only a registered export of this store, as its listing found it
    key = layout.export_file_key(prefix, SPEC_NAME)
    sha = record.files[SPEC_NAME].sha256
    local = folder / SPEC_NAME
    data = local.read_bytes() if local.is_file() else None
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        blob = survey.store.get(key)
        data = blob.data if blob is not None else None
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        return None
    try:
        return model_from_yaml(local, BuildSpec, text=data.decode("utf-8"))
    except (UserInputError, UnicodeDecodeError):
        return None


def _from_export(survey: StoreSurvey, ref: ExportRef, record: ExportRecord | None,
                 precision: str | None) -> ExpectedExport:
    from trtfarm.precision.recipe import Recipe  # a registered export's recipe: not on a local build's path
    from trtfarm.precision.step import precision_key_of
    from trtfarm.publishing.registry import export_record

    name = ref.name
    try:
        record = record or export_record(ref)
        if record is None:
            return _unrecorded(survey, ref, precision)
        spec = _spec(survey, ref, record, ref.uri if ref.export_id else None)
    except UserInputError as err:
        return ExpectedExport(name, "", "?", None, None, export_id=ref.export_id, unknown=str(err))
    except (CorruptObject, IntegrityError) as err:  # its record or spec is damaged: its cells say so, others stand
        return ExpectedExport(name, "", "?", None, None, export_id=ref.export_id, damaged=str(err))
    recipe = Recipe.model_validate(spec.recipe)
    if precision:
        recipe = recipe.model_copy(update={"mode": precision})
    size = sum(f.bytes for n, f in record.files.items() if n in (record.model_files or [layout.ONNX_NAME]))
    base = ExpectedExport(name, record.onnx_digest, recipe.mode, record.onnx_digest, spec.profiles,
                          export_id=record.export_id, registered_at=record.registered_at,
                          targets=tuple(spec.targets) or None, size_bytes=size,
                          channel="candidate" if spec.promotion else "stable")
    if recipe.mode == "fp32" and not recipe.auto_pin:
        return base
    sha = {n: f.sha256 for n, f in record.files.items()}
    step = precision_key_of(recipe, record.onnx_digest, sha.get(spec.calibration or ""), sha.get(spec.heldout or ""))
    converted = _converted_digest(survey, name, record.onnx_digest, step)
    if converted is None:
        return ExpectedExport(**{**base.__dict__, "converted_digest": None, "unknown": (
            f"the {recipe.mode} precision step has not run for export {base.label} yet (a run converts and gates it "
            "before any build)")})
    return ExpectedExport(**{**base.__dict__, "converted_digest": converted})


def _converted_digest(survey: StoreSurvey, model: str, onnx_digest: str, step: str) -> str | None:
    """The converted ONNX's digest a stored precision step recorded (None: the step has not run)."""
    import json

    key = layout.converted_report_key(layout.converted_prefix(model, onnx_digest, step))
    cached = survey.cache.get("step", key, "stored")
    if isinstance(cached, str):
        return cached
    blob = survey.store.get(key)
    if blob is None:
        return None
    try:
        digest = json.loads(blob.data)["digest"]
    except (ValueError, KeyError, TypeError):
        survey.problems.append(f"{survey.store.url(key)}: not a precision step's report; the next run converts again")
        return None
    survey.cache.put("step", key, "stored", digest)  # written once, create-only: it never changes
    return digest


def _unrecorded(survey: StoreSurvey, ref: ExportRef, precision: str | None) -> ExpectedExport:
    """An export folder without a record (a pipeline dropped it): fetched whole, digested as a run would."""
    from trtfarm.modelfile import model_source
    from trtfarm.profiles.profile import profiles_json
    from trtfarm.project.spec_file import spec_for_model, spec_precision, spec_profiles
    from trtfarm.publishing.registry import local_copy

    path = local_copy(ref)
    spec, _ = spec_for_model(path)
    model = model_source(path, ref.name)
    recipe = spec_precision(path, spec, precision)[0]
    profiles = profiles_json(spec_profiles(path, spec)[0])
    size = sum((path.parent / n).stat().st_size for n, _ in model.files)
    base = ExpectedExport(ref.name, model.onnx_digest, recipe.mode, model.onnx_digest, profiles,
                          registered_at=model.exported_at, targets=tuple(spec.targets) or None, size_bytes=size,
                          channel="candidate" if spec.promotion is not None else "stable")
    if recipe.mode == "fp32" and not recipe.auto_pin:
        return base
    return ExpectedExport(**{**base.__dict__, "converted_digest": None, "unknown": (
        f"{ref.uri}: the {recipe.mode} precision step of an unregistered export is known only once a run does it")})


def _from_releases(survey: StoreSurvey, models: list[str]) -> dict[str, ExpectedExport]:
    """Models with plans but no registered export: the export of each one's newest released (else published) plan."""
    if not models:  # every model registered (or read from its state record): no pointer key to parse
        return {}
    pointers = survey.pointer_summaries(k for k in survey.pointers
                                        if (name := layout.parse_release_key(k)) and name.model in set(models))
    released = {layout.folder_of(p.manifest): p for p in pointers.values()}
    newest: dict[str, ManifestSummary] = {}
    for prefix, m in survey.manifests(released).items():
        model = layout.parse_plan_prefix(prefix).model
        if model not in newest or (m.exported_at or "", m.created_at) > (newest[model].exported_at or "",
                                                                         newest[model].created_at):
            newest[model] = m
    unreleased = [m for m in models if m not in newest]
    folders = [f.prefix for m in unreleased for f in survey.by_model.get(m, [])]
    for prefix, m in survey.manifests(folders).items():
        model = layout.parse_plan_prefix(prefix).model
        if model not in newest or (m.exported_at or "", m.created_at) > (newest[model].exported_at or "",
                                                                         newest[model].created_at):
            newest[model] = m
    return {model: ExpectedExport(model, m.onnx_digest, m.recipe, m.converted_digest, m.profiles,
                                  registered_at=m.exported_at)
            for model, m in newest.items()}


SAME_INPUTS = "the same build inputs, but not published for this target yet"


@dataclass(frozen=True)
class TargetInputs:
    """The target's half of a build digest: toolchain, GPU, compatibility class and builder settings."""

    flavour: str
    version: str
    gpu: str
    compat_class: str
    settings: dict

    @classmethod
    def of_target(cls, t: ResolvedTarget) -> TargetInputs:
        """What a fleet's target builds with."""
        return cls(t.toolchain.flavour.value, t.toolchain.version, t.gpu_key, t.compat_class,
                   t.settings.model_dump(mode="json"))

    @classmethod
    def of_manifest(cls, m: ManifestSummary) -> TargetInputs:
        """What a published build was built with, as its manifest records it."""
        return cls(m.flavour, m.toolchain_version, m.gpu, m.compat_class, m.settings)


def target_differences(was: TargetInputs, now: TargetInputs) -> list[str]:
    """What differs in the target's half of a build digest: the one wording status and the what-if both use."""
    reasons = []
    if (was.flavour, was.version) != (now.flavour, now.version):
        reasons.append(f"toolchain: {was.flavour} {was.version} -> {now.flavour} {now.version}")
    if was.gpu != now.gpu:
        reasons.append(f"GPU: {was.gpu} -> {now.gpu}")
    elif was.compat_class != now.compat_class:
        reasons.append(f"GPU class: {was.compat_class} -> {now.compat_class}")
    reasons += [f"builder setting: {k} {was.settings.get(k)} -> {now.settings.get(k)}"
                for k in sorted(set(was.settings) | set(now.settings)) if was.settings.get(k) != now.settings.get(k)]
    return reasons


def build_changes(prev: ManifestSummary, x: ExpectedExport, t: ResolvedTarget) -> list[str]:
    """What differs between a published build and ``t``'s build of ``x``: the parts of the build digest."""
    reasons = target_differences(TargetInputs.of_manifest(prev), TargetInputs.of_target(t))
    if prev.onnx_digest != x.onnx_digest:
        reasons.append(f"export: {x.label} is newer than the built onnx {prev.onnx_digest[:12]}")
    if prev.recipe != x.recipe:
        reasons.append(f"precision recipe: {prev.recipe} -> {x.recipe}")
    elif x.converted_digest and prev.onnx_digest == x.onnx_digest and prev.converted_digest != x.converted_digest:
        reasons.append(f"precision step: the {x.recipe} conversion changed (recipe options or calibration data)")
    if x.profiles is not None and prev.profiles != x.profiles:
        reasons.append("profiles: the build spec's optimization profiles changed")
    return reasons or [SAME_INPUTS]


def stale_changes(released: ManifestSummary, x: ExpectedExport, t: ResolvedTarget) -> str:
    """Why the released build is not the one ``t`` gets from ``x`` now, as a stale cell says it."""
    changes = build_changes(released, x, t)
    if changes == [SAME_INPUTS]:
        return "the released build is not the one published for this target; a run rebuilds it"
    return "; ".join(changes) + " (not built yet)"
