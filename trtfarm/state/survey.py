"""What the store holds, for fleet views: four listings, and each object's summary read once per version.

``StoreSurvey`` lists the registry (``models/``), the plans (``plans/``), the release pointers (``releases/``) and,
for ``trtfarm status``, the stored run outcomes (``reports/``), each in one paginated listing with every object's
version (``Store.list_versions``). Objects are read only when a view needs their contents, many at once, and only
when the listing shows a version this machine has not summarised before (``SummaryCache``). Nothing is written to
the store. How the listings are listed (in parts on S3) and read into per-model maps is ``listings.py``'s.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from trtfarm import layout
from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.state.listings import (
    READ_THREADS,
    exports_of,
    grouped_by_model,
    listed_in_parts,
    listed_one,
    plan_folders,
    receipts_of,
    runs_of,
    states_of,
)
from trtfarm.state.record import RecordedState
from trtfarm.state.summaries import ManifestSummary, OutcomeSummary, PointerSummary, SummaryCache
from trtfarm.store import Store
from trtfarm.store.base import ListedObject, side_by_side
from trtfarm.vocabulary.exports import ExportRecord
from trtfarm.vocabulary.manifest import manifest_from_json
from trtfarm.vocabulary.pointer import pointer_from_json


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a fleet view runs (and restored as it was after).

    A view of 1,000 models makes some 200,000 long-lived objects (listings, summaries, cells) and no reference cycles
    worth collecting: each full pass of the collector walks them all and every object imported before, which cost a
    quarter of a cold ``status``'s CPU. Whatever cycles a view leaves are collected once it ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class StoreSurvey:
    """The store's registry, plans, release pointers (and run outcomes), from listings; contents read on demand."""

    def __init__(self, store: Store, cache: SummaryCache | None = None, *, runs: bool = False,
                 model: str | None = None, keep_parsed: bool = False) -> None:
        self.store, self.cache = store, cache or SummaryCache(None)
        # keep_parsed: each pointer and manifest read is also left here parsed (key -> ReleasePointer, or
        # (Manifest, its bytes)), for a check that needs the objects themselves; whoever takes them lets them go
        self.parsed: dict[str, object] | None = {} if keep_parsed else None
        self.problems: list[str] = []
        self.damaged: dict[str, str] = {}  # key -> what is wrong with it, for the objects read and found damaged
        self._recorded: dict[str, tuple[str, list, dict]] = {}  # manifest key -> (version, row, shared values)
        prefixes = [layout.exports_prefix(model), layout.plans_prefix(model), layout.releases_prefix(model),
                    layout.converted_models_prefix(model), layout.channel_prefix("candidate", model)]
        if runs:
            prefixes.append(layout.reports_prefix(model))
        if model is None and store.paged_listings:  # S3: the records first, then every listing in parts
            self.states, listed = listed_in_parts(store, prefixes)
        else:
            with side_by_side(store, len(prefixes) + 1) as pool:
                states = pool.submit(lambda: list(store.list_versions(layout.state_prefix())) if model is None else
                                     [o for o in [listed_one(store, layout.state_key(model))] if o])
                listed = list(pool.map(lambda p: list(store.list_versions(p)), prefixes))
                self.states = states_of(states.result())
        self.exports = exports_of(listed[0])
        self.folders, self.by_model = plan_folders(listed[1])  # by_model: model -> its plan folders, in listing order
        self.pointers = {o.key: o for o in listed[2]}
        self.converted = grouped_by_model(listed[3], 1)
        self.candidates = {o.key: o for o in listed[4]}  # the candidate channel's pointers (models with promotion:)
        self.runs = runs_of(listed[5]) if runs else {}
        self._pointers_of = grouped_by_model(listed[2], 1)
        self.receipts = receipts_of(store, model, self.candidates)  # of models with a candidate: one listing more

    def model_inputs(self, model: str, runs_back: int, stamp: str = "version") -> str:
        """A digest of every listed object a model's state is made from (by version); equal digests, equal state.

        Its export records, plan folders (plans, manifests, attestations), release pointers, stored precision steps,
        its newest ``runs_back`` runs' outcomes and, where it has a candidate, its load receipts, in key order.
        Computed from the listings alone, so a view knows without reading anything whether the state recorded in the
        store (``state/<model>.json``) is the state of these objects. ``stamp="size"``: by size, not version (equal
        in a copy of the store that did not keep the objects' versions, and after a change of the same size).
        """
        objects = [o for _, o in self.exports.get(model, [])]
        objects += [o for f in self.by_model.get(model, []) for o in self.folders[f.prefix].values()]
        objects += self._pointers_of.get(model, [])
        objects += [o for k, o in self.candidates.items() if layout.parse_model(k) == model]
        objects += self.converted.get(model, [])
        objects += [o for _, o in self.runs.get(model, [])[:runs_back]]
        objects += self.receipts.get(model, [])
        parts = sorted(f"{o.key}@{o.version if stamp == 'version' else o.size}" for o in objects)
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    # --- what the listings say -------------------------------------------------------------------------------------
    def models(self) -> list[str]:
        """Every model the store knows: registered, or with plans or release pointers."""
        named = set(self.exports) | set(self.by_model)
        named |= set(self._pointers_of)
        return sorted(named)

    def published(self, prefix: str) -> bool:
        """True when the folder's manifest and a non-empty plan object are listed (what a run calls up to date)."""
        objects = self.folders.get(prefix)
        return bool(objects and layout.MANIFEST_NAME in objects and objects.get(layout.PLAN_NAME)
                    and objects[layout.PLAN_NAME].size)

    def signature_listed(self, prefix: str, manifest_sha256: str) -> bool:
        """True when the folder holds a signature of the manifest with this sha256."""
        return layout.signature_name(manifest_sha256) in self.folders.get(prefix, {})

    def export_rank(self, model: str) -> dict[str, int]:
        """``onnx12 -> rank`` of the model's registered exports (higher: registered later)."""
        return {export_id.rsplit("-", 1)[-1]: i for i, (export_id, _) in enumerate(self.exports.get(model, []))}

    # --- contents, read once per version ----------------------------------------------------------------------------
    def manifests(self, prefixes: Iterable[str]) -> dict[str, ManifestSummary]:
        """The summaries of the manifests in these plan folders (those listed and readable)."""
        items = {p: self.folders[p][layout.MANIFEST_NAME] for p in prefixes
                 if layout.MANIFEST_NAME in self.folders.get(p, {})}

        def parse(data: bytes, key: str) -> ManifestSummary:
            manifest = manifest_from_json(data, self.store.url(key))
            if self.parsed is not None:
                self.parsed[key] = (manifest, data)
            return ManifestSummary.of(manifest, data)

        return self._read("manifest", {layout.manifest_key(p): o for p, o in items.items()}, parse,
                          ManifestSummary, by=lambda key: layout.folder_of(key))

    def listed_pointer(self, key: str) -> ListedObject | None:
        """A channel pointer as the listing shows it: a release or candidate pointer (None: not listed)."""
        return self.pointers.get(key) or self.candidates.get(key)

    def channel_pointers(self, model: str | None = None) -> list[str]:
        """The keys of every channel pointer listed (of ``model``): the release pointers, then the candidates'."""
        stable = [o.key for o in self._pointers_of.get(model, [])] if model else list(self.pointers)
        return [*stable, *(k for k in self.candidates if model is None or layout.parse_model(k) == model)]

    def pointer_summaries(self, keys: Iterable[str]) -> dict[str, PointerSummary]:
        """The summaries of these channel pointers (those listed and readable)."""
        def parse(data: bytes, key: str) -> PointerSummary:
            try:
                pointer = pointer_from_json(data, self.store.url(key))  # older schemas upgraded
                summary = PointerSummary.of(pointer)
            except ValueError as err:
                raise CorruptObject(f"{self.store.url(key)}: not a release pointer; `trtfarm build` of the model "
                                    "repairs it") from err
            if self.parsed is not None:
                self.parsed[key] = pointer
            return summary

        return self._read("pointer", {k: o for k in keys if (o := self.listed_pointer(k))}, parse, PointerSummary)

    def records(self, models: Iterable[str], export_ids: dict[str, str] | None = None) -> dict[str, ExportRecord]:
        """Each model's registered export record: its newest, or the one ``export_ids`` names (when listed)."""
        items = {}
        for model in models:
            listed = dict(self.exports.get(model, []))
            export_id = (export_ids or {}).get(model) or (max(listed) if listed else None)
            if export_id in listed:
                items[listed[export_id].key] = listed[export_id]

        def parse(data: bytes, key: str) -> ExportRecord:
            return ExportRecord.from_bytes(data, self.store.url(key))

        found = self._read("record", items, parse, ExportRecord)
        return {layout.parse_export_record_key(key)[0]: ExportRecord.model_validate(doc) for key, doc in found.items()}

    def outcomes(self, keys: Iterable[tuple[str, ListedObject]]) -> dict[str, list[OutcomeSummary]]:
        """The stored outcomes of these runs (``outcomes.json`` objects), by key."""
        def parse(data: bytes, key: str) -> list[OutcomeSummary]:
            try:
                records = json.loads(data)
                return [OutcomeSummary(r["target"], r["status"], r.get("reason") or "", r.get("build_digest"))
                        for r in records if r["status"] in ("failed", "skipped")]
            except (ValueError, KeyError, TypeError) as err:
                raise CorruptObject(f"{self.store.url(key)}: not a run's outcomes ({err})") from err

        return self._read("outcomes", dict(keys), parse, OutcomeSummary)

    def recorded(self, models: Iterable[str]) -> dict[str, RecordedState]:
        """The state records (``state/<model>.json``) of these models, those listed and readable."""
        from trtfarm.state.record import recorded_state_from_json

        items = {layout.state_key(m): self.states[m] for m in models if m in self.states}
        found = self._read("state", items, lambda data, key: recorded_state_from_json(data, self.store.url(key)),
                           RecordedState, keep_text=True, proven=self._indexed if self.store.md5_versions else None)
        return {layout.parse_state_key(k): v for k, v in found.items()}

    def _indexed(self, keys: list[str]) -> dict[str, bytes]:
        """The bytes of these state records that the index proves (``state/record_index.py``), where worth it.

        Worth a read where the shards the records fall in are at most half as many as the records.
        """
        from trtfarm.state.record_index import indexed_records, shard_of

        models = {layout.parse_state_key(k): k for k in keys}
        if len({shard_of(m) for m in models}) * 2 > len(models):
            return {}
        found = indexed_records(self.store, {m: self.states[m] for m in models})
        return {models[m]: data for m, data in found.items()}

    def know_manifests(self, states: Iterable[RecordedState]) -> None:
        """Take the manifest summaries these (current) state records keep, each for the version it was read at.

        ``manifests`` answers from them, for a manifest the listing shows at that version, instead of reading it.
        A record of another summary layout is left out (its manifests are read).
        """
        layout_of = ManifestSummary.layout()
        for state in states:
            if state.summary_layout != layout_of:
                continue
            shared = {ref: [ref, value] for ref, value in state.summary_values.items()}  # as from_row reads them
            for key, (version, row) in state.manifests.items():
                self._recorded[key] = (version, row, shared)

    def _recorded_manifest(self, key: str, version: str) -> ManifestSummary | None:
        """The summary a state record keeps of the manifest at ``key``, if it was read at ``version``."""
        kept = self._recorded.get(key)
        if kept is None or kept[0] != version:
            return None
        try:
            return ManifestSummary.from_row(kept[1], kept[2])
        except (TypeError, KeyError, IndexError):  # a row that does not fit the layout: the manifest is read
            return None

    def save(self) -> None:
        """Keep what was read for the next view on this machine."""
        self.cache.save()

    def _read(self, kind: str, items: dict[str, ListedObject], parse: Callable[[bytes, str], object], model,
              by: Callable[[str], str] | None = None, keep_text: bool = False,
              proven: Callable[[list[str]], dict[str, bytes]] | None = None) -> dict:
        """Each item's summary: from the cache at the listed version, else read (many at once) and parsed.

        ``keep_text``: the value is the object's own JSON parsed whole (a state record), so the cache keeps the
        text read (the same value when parsed again) rather than the value serialised again. ``proven``: the bytes
        of some of the keys not remembered, each proven to be the listed object's (read in their place).
        """
        out, todo = {}, []
        for key, obj in items.items():
            hit = self.cache.get(kind, key, obj.version, model)
            if hit is None and self._recorded and model is ManifestSummary:
                hit = self._recorded_manifest(key, obj.version)
            if hit is not None:
                out[(by or str)(key)] = hit
            else:
                todo.append(key)

        def fetch(key: str):
            data = known.get(key)
            if data is None:
                blob = self.store.get(key)
                if blob is None:  # deleted since the listing (gc): as if never listed
                    return None
                data = blob.data
            try:
                value = parse(data, key)
                return value, (data.decode() if keep_text and value is not None else value)
            except (CorruptObject, UserInputError) as damaged:
                self.problems.append(str(damaged))
                self.damaged[key] = str(damaged)
                return None

        if not todo:  # every one remembered: no reader threads
            return out
        known = proven(todo) if proven is not None else {}
        size = max(1, min(64, len(todo) // (READ_THREADS * 4)))  # a task per batch: a submit per key cost more CPU
        batches = [todo[i:i + size] for i in range(0, len(todo), size)]  # than the read it started, on 2 cores
        with side_by_side(self.store, min(READ_THREADS, len(batches))) as pool:
            for batch, values in zip(batches, pool.map(lambda b: [fetch(k) for k in b], batches), strict=True):
                for key, read in zip(batch, values, strict=True):
                    if read is not None and read[0] is not None:
                        self.cache.put(kind, key, items[key].version, read[1])
                        out[(by or str)(key)] = read[0]
        return out


