"""The model registry in the store: model exports, and where a run finds the one to build.

An export is a folder: ``model.onnx`` and its build spec ``farm.yaml``, with ``calib.npz``, ``heldout.npz``,
``shapes.jsonl`` (or the profiles file farm.yaml names) when the model has them. Registered exports live at
``models/<name>/<export_id>/`` where ``export_id`` is ``<UTC time>-<onnx_digest:12>``, so the newest sorts last. The
files go first and ``export.json`` (their sha256s) last, create-only: an export without ``export.json`` is invisible,
like a plan without its manifest.

A run names its model as a registered name (its latest export), ``name@export_id``, or the URI of any export folder
(``s3://bucket/path/`` or ``file:///path/``, e.g. where a training pipeline drops it). Workers fetch the folder into
a local directory and check each file against ``export.json`` when there is one.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

from trtfarm.cachedir import work_dir
from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.identity import model_name_from_path, sha256_file
from trtfarm.layout import (
    EXPORT_NAME,
    MANIFEST_NAME,
    ONNX_NAME,
    check_name,
    export_file_key,
    export_prefix,
    exports_prefix,
    parse_export_record_key,
    plans_prefix,
)
from trtfarm.onnxfile import external_files, external_locations, load_model, location_path
from trtfarm.project.spec_file import spec_for_model
from trtfarm.store import AlreadyExists, Store, is_store_uri, is_uri, open_store, uri_parts
from trtfarm.vocabulary.buildspec import SHAPES_NAME, SPEC_NAME
from trtfarm.vocabulary.exports import ExportFile, ExportRecord, ExportRef

OPTIONAL_FILES = ("calib.npz", "heldout.npz", SHAPES_NAME)


def export_files(folder: Path) -> list[Path]:
    """The files of the export folder that a build reads (model, its external data, spec, data, profiles file)."""
    folder = Path(folder)
    if not (folder / ONNX_NAME).is_file():
        raise UserInputError(f"{folder}: no {ONNX_NAME}; an export folder holds model.onnx and farm.yaml")
    spec, spec_path = spec_for_model(folder / ONNX_NAME)
    named = [spec.calibration, spec.heldout, spec.profiles if isinstance(spec.profiles, str) else None]
    weights = [f for _, f in external_files(folder / ONNX_NAME)]
    files = [folder / ONNX_NAME, *weights, *([spec_path] if spec_path else [])]
    for rel in filter(None, named):
        inside = (folder / rel).resolve()
        if folder.resolve() not in inside.parents:
            raise UserInputError(f"{folder / SPEC_NAME}: {rel!r} is outside the export folder {folder}; copy the "
                                 "file into the folder and name it relative to farm.yaml (e.g. calib.npz)")
    for rel in [*OPTIONAL_FILES, *filter(None, named)]:
        path = folder / rel
        if path.is_file() and path not in files:
            files.append(path)
        elif rel in named and not path.is_file():
            raise UserInputError(f"{path}: named in farm.yaml but not there")
    return files


def register_export(store: Store, folder: Path, name: str | None = None, progress=None) -> ExportRef:
    """Upload an export folder into the registry; the ONNX is checked first. Returns its reference."""
    from trtfarm.modelfile import model_source

    folder = Path(folder)
    files = export_files(folder)
    spec, _ = spec_for_model(folder / ONNX_NAME)
    name = check_name("model name", name or spec.name or model_name_from_path(folder / ONNX_NAME))
    source = model_source(folder / ONNX_NAME, name)
    now = datetime.now(timezone.utc)
    export_id = f"{now:%Y%m%dT%H%M%S%fZ}-{source.onnx_digest[:12]}"
    prefix = export_prefix(name, export_id)
    uploaded = {}
    for path in files:
        rel = path.relative_to(folder).as_posix()
        up = store.upload_file(export_file_key(prefix, rel), path, progress)
        uploaded[rel] = ExportFile(sha256=up.sha256, bytes=up.size)
    record = ExportRecord(name=name, export_id=export_id, registered_at=now.isoformat(), source=str(folder.resolve()),
                          onnx_digest=source.onnx_digest, graph_digest=source.graph_digest, files=uploaded,
                          model_files=[n for n, _ in source.files])
    if not store.put_if_absent(export_file_key(prefix, EXPORT_NAME), record.to_bytes()):
        raise AlreadyExists(f"{store.url(prefix)}: this export id is taken; register again")
    return ExportRef(store.url(prefix), name, export_id)


def export_place(store: Store, name: str, onnx_digest: str, registered_at: str | None = None) -> str:
    """The place of these bytes in the order of ``name``'s exports: when they were first registered or first built.

    A registered export (``registered_at``: its record's) takes the first registration of its bytes (``onnx_digest``)
    under ``name``, read from the export ids (``<UTC time>-<onnx_digest:12>``) of one listing. Another export (a
    local file, a dropped folder) takes the ``exported_at`` that the first published plan of its bytes recorded, from
    one listing of their plans; with none, now (this is their first build). Regenerated identical bytes keep the place
    they took first, whatever their file's time: a file's time is never read. UTC, ISO 8601 with microseconds.
    """
    found = [registered_at, *_registered_at(store, name, onnx_digest)] if registered_at else \
        _published_at(store, name, onnx_digest)
    times = [when for text in found if text and (when := _utc(text))]
    return min(times or [datetime.now(timezone.utc)]).isoformat(timespec="microseconds")


def _registered_at(store: Store, name: str, onnx_digest: str) -> list[str]:
    """When each registration of ``name`` with these bytes was made: the time its export id begins with."""
    found = []
    for _, export_id in _records(store, name):
        when, _, digest12 = export_id.partition("-")
        if digest12 == onnx_digest[:12]:
            try:
                found.append(datetime.strptime(when, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc).isoformat())
            except ValueError:
                continue  # an id not in the form registration writes places nothing
    return found


def _published_at(store: Store, name: str, onnx_digest: str) -> list[str]:
    """The ``exported_at`` that each published manifest of these bytes recorded (the first build's, and since)."""
    from trtfarm.publishing.publish import read_manifest

    found = []
    for key in store.list(f"{plans_prefix(name)}{onnx_digest[:12]}/"):
        try:
            m = read_manifest(store, key) if key.endswith(f"/{MANIFEST_NAME}") else None
        except CorruptObject:
            continue  # a damaged manifest places nothing; its rebuild replaces it
        if m is not None and m.model.onnx_digest == onnx_digest and m.model.exported_at:
            found.append(m.model.exported_at)
    return found


def _utc(text: str) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime; None for one that does not parse (it places nothing)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _records(store: Store, name: str | None = None) -> list[tuple[str, str]]:
    """``(model, export_id)`` of every complete export (its ``export.json`` is there), of one model or all."""
    return [parsed for k in store.list(exports_prefix(name)) if (parsed := parse_export_record_key(k))]


def _exports(store: Store, name: str) -> list[str]:
    return sorted(export_id for _, export_id in _records(store, name))


def registered_models(store: Store) -> list[str]:
    """Every model name with at least one complete export."""
    return sorted({model for model, _ in _records(store)})


def latest_exports(store: Store) -> list[ExportRef]:
    """The newest complete export of every registered model (what the nightly run builds), from one listing."""
    newest: dict[str, str] = {}
    for model, export_id in _records(store):
        if export_id > newest.get(model, ""):
            newest[model] = export_id
    return [ExportRef(store.url(export_prefix(name, export_id)), name, export_id)
            for name, export_id in sorted(newest.items())]


def resolve_model(store: Store, ref: str) -> ExportRef:
    """``name``, ``name@export_id`` or an export folder URI -> the export to build."""
    if is_uri(ref):
        uri = export_folder(ref)  # a dropped folder's farm.yaml names it, as for a build of its model.onnx
        return ExportRef(uri, export_name(uri), named=is_registry_export(uri))
    name, _, wanted = ref.partition("@")
    check_name("model name", name)
    ids = _exports(store, name)
    if not ids:
        known = registered_models(store)
        raise UserInputError(f"model {name!r} is not registered in {store.url(exports_prefix())}; registered: "
                             f"{known or 'none'}. Fix: `trtfarm models push FOLDER` or give an export folder URI")
    if wanted and wanted not in ids:
        raise UserInputError(f"model {name!r} has no export {wanted!r}; newest: {ids[-1]}")
    export_id = wanted or ids[-1]
    return ExportRef(store.url(export_prefix(name, export_id)), name, export_id)


def export_folder(uri: str) -> str:
    """The export folder a URI names: the folder itself, or the folder of its ``model.onnx``."""
    uri = uri.rstrip("/")
    return uri.rsplit("/", 1)[0] if uri.endswith(f"/{ONNX_NAME}") else uri


def _registered_as(folder_uri: str) -> tuple[str, str] | None:
    """``(model, export_id)`` of a folder laid out by the registry (``.../models/<name>/<export_id>``), else None."""
    tail = "/".join([p for p in uri_parts(folder_uri)[2].split("/") if p][-3:])
    return parse_export_record_key(export_file_key(tail, EXPORT_NAME))


def is_registry_export(folder_uri: str) -> bool:
    """True for a folder laid out by the registry: ``.../models/<name>/<export_id>``."""
    return _registered_as(folder_uri) is not None


def export_name(folder_uri: str) -> str:
    """The model name of an export folder: a registry export's model, else the folder's name."""
    registered = _registered_as(folder_uri)
    if registered:
        return registered[0]
    parts = [p for p in uri_parts(folder_uri)[2].split("/") if p]
    return model_name_from_path(Path(parts[-1] if parts else "model") / ONNX_NAME)


def _folder_store(uri: str) -> Store:
    if not is_store_uri(uri):
        raise UserInputError(f"export {uri!r}: use s3://bucket/path or file:///path")
    return open_store(uri.rstrip("/"))


def export_record(ref: ExportRef) -> ExportRecord | None:
    """The export's ``export.json`` (digests recorded at registration), or None for a folder a pipeline dropped."""
    return _read_record(_folder_store(ref.uri))


def _read_record(folder: Store) -> ExportRecord | None:
    blob = folder.get(EXPORT_NAME)
    return ExportRecord.from_bytes(blob.data, folder.url(EXPORT_NAME)) if blob is not None else None


HEAVY_FILES = (ONNX_NAME, "calib.npz", "heldout.npz")  # what only a build reads (and the model's external data)


def fetch_export(ref: ExportRef, dest: Path, *, spec_only: bool = False, record: ExportRecord | None = None) -> Path:
    """Download the export folder into ``dest`` (checked against export.json); returns the local model.onnx.

    ``spec_only`` fetches what planning reads (farm.yaml, a profiles file, shapes.jsonl) and leaves the model and
    its data where they are: a run that finds everything published never downloads them. ``record``: the export's
    ``export.json``, when the caller has read it already.
    """
    folder = _folder_store(ref.uri)
    dest = Path(dest)
    if record is None:
        record = _read_record(folder)
    registered_at = None
    if record is not None:
        wanted = {rel: f.sha256 for rel, f in record.files.items()}
        registered_at = datetime.fromisoformat(record.registered_at).timestamp()
    else:  # a folder a pipeline dropped: take what is there
        wanted = {k: None for k in folder.list("") if k == ONNX_NAME or "/" not in k}
    if ONNX_NAME not in wanted:
        raise UserInputError(f"{ref.uri}: no {ONNX_NAME} in the export folder")
    if spec_only:
        heavy = {*HEAVY_FILES, *(record.model_files if record else [])}
        wanted = {rel: sha for rel, sha in wanted.items() if rel not in heavy}
    for rel, sha in wanted.items():
        _fetch_file(folder, rel, dest, sha)
    if spec_only:
        return dest / ONNX_NAME
    model = dest / ONNX_NAME
    proto = load_model(model)  # parsed once for both questions below
    for location in external_locations(proto):
        if location not in wanted:  # a dropped folder keeps its weights in a subfolder the listing left out
            location_path(model, location)  # refused before anything is written outside dest
            _fetch_file(folder, location, dest, None)
    external = [f for _, f in external_files(model, proto)]  # all there now, none outside the folder
    if registered_at is not None:  # the export's time is its registration, not this download (release ordering)
        for path in (model, *external):
            os.utime(path, (registered_at, registered_at))
    if (dest / SPEC_NAME).is_file():
        export_files(dest)  # farm.yaml names only files that are there
    return model


def _fetch_file(folder: Store, rel: str, dest: Path, sha: str | None) -> None:
    """Download one file of an export folder into ``dest`` unless an identical copy is there already."""
    target = dest / rel
    if sha and target.is_file() and sha256_file(target) == sha:
        return  # fetched before
    target.parent.mkdir(parents=True, exist_ok=True)
    folder.download_file(rel, target, sha256=sha)


def local_copy(export: ExportRef, record: ExportRecord | None = None) -> Path:
    """The export's model.onnx on this machine: fetched (sha256-checked, cached by URI) or the local path itself.

    ``record``: the export's ``export.json``, when the caller has read it already.
    """
    if not is_uri(export.uri):
        return Path(export.uri)
    return fetch_export(export, fetch_folder(export, "exports"), record=record)


def fetch_folder(export: ExportRef, kind: str) -> Path:
    """This user's own folder for ``kind`` (``exports``, ``specs``) fetched from ``export``, one per export URI.

    Each file fetched there is checked against the sha256 that ``export.json`` records, before use and again when
    a later run finds it there: a damaged file is fetched again.
    """
    return work_dir(kind, hashlib.sha256(export.uri.encode()).hexdigest()[:16])
