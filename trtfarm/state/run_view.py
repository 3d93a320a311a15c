"""The store's read model as a run asks it: is the cell of this build released?

A run's planner (``planning/triage.py``: ``triage_listed``) asks ``RunView`` of each target whose build the listings
show published and released: the build is up to date when the model's cell for the target (``state/cells.py``, as
``trtfarm status`` shows it) is ``released`` and names this very build's manifest. The cell comes from the model's
state record while it is current (one object per model), else it is computed from the store's records, once per
model. Any other cell (damaged, refused, stale, a pointer naming another build) is the planner's to look at: it reads
the target's manifest and pointer and decides a release, a withdrawal or a build.

``farm run --dry-run`` asks the same planner (``planning/dry_run.py``), so it cannot differ from the run.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone

from trtfarm import layout
from trtfarm.state.summaries import SummaryCache
from trtfarm.state.survey import StoreSurvey
from trtfarm.store import Store
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets


class RunView:
    """What a run reads of the store: its plans and release pointers listed once, each model's cells on demand.

    ``targets``: the targets the run asks about, resolved already (None: the fleet's every target).
    ``whole_store``: one survey of every model (a run over many models); else the plans of one export and the
    release pointers of its model are listed, and the model's survey is made only when a cell is asked for. Safe to
    ask from several planning threads. ``cached``: with this machine's summaries of the objects read (a dry run's,
    as a view's; ``save`` keeps what was read); a run reads afresh.
    """

    def __init__(self, store: Store, fleet: Fleet, targets: list[ResolvedTarget] | None = None, *,
                 whole_store: bool = False, cached: bool = False) -> None:
        cache = SummaryCache.for_store(store.uri) if cached else None
        self.store, self.fleet, self.cache = store, fleet, cache
        self.targets = targets  # the run's targets, resolved (None: the fleet's every target)
        self._lock = threading.Lock()
        self._survey = StoreSurvey(store, cache, runs=True, keep_parsed=True) if whole_store else None
        self._pointers = set(self._survey.pointers) if self._survey else set()
        self._listed: dict[str, tuple[dict[str, int], set[str]]] = {}  # model/onnx12 -> (sizes, pointer keys)
        self._cells: dict[str, dict[str, tuple[str, str | None]]] = {}  # model -> target -> (state, manifest)
        self._records: dict[str, dict[str, tuple[str, str | None]]] | None = None  # current records' cells

    def _listing(self, manifest_key: str) -> tuple[dict[str, int], set[str]]:
        """(object key -> size, release pointer keys) of the folder's model, from the listings."""
        model, onnx12 = layout.parse_plan_key(manifest_key)[:2]
        if self._survey is not None:
            s = self._survey
            folder = s.folders.get(layout.folder_of(manifest_key), {})
            return {o.key: o.size for o in folder.values()}, self._pointers
        with self._lock:
            if f"{model}/{onnx12}" not in self._listed:
                sizes = dict(self.store.list_sizes(f"{layout.plans_prefix(model)}{onnx12}/"))
                self._listed[f"{model}/{onnx12}"] = (sizes, set(self.store.list(layout.releases_prefix(model))))
            return self._listed[f"{model}/{onnx12}"]

    def plan_bytes(self, manifest_key: str) -> int | None:
        """The plan object's listed size when the folder's manifest and a non-empty plan are listed, else None."""
        sizes = self._listing(manifest_key)[0]
        size = sizes.get(layout.plan_key(layout.folder_of(manifest_key)))
        return size if manifest_key in sizes and size else None

    def manifest_listed(self, manifest_key: str) -> bool:
        """Whether the listing shows the folder's manifest."""
        return manifest_key in self._listing(manifest_key)[0]

    def pointer_listed(self, manifest_key: str, pointer_key: str) -> bool:
        """Whether the listing shows this channel pointer of the folder's model."""
        return pointer_key in self._listing(manifest_key)[1]

    def released(self, target: str, manifest_key: str) -> bool:
        """Whether the folder's model's cell for ``target`` is released and names ``manifest_key`` (status's rule)."""
        state, manifest = self._cells_of(layout.parse_plan_key(manifest_key).model).get(target, ("missing", None))
        return state == "released" and manifest == manifest_key

    def _cells_of(self, model: str) -> dict[str, tuple[str, str | None]]:
        """The model's cells: from its current state record, else computed from the store's records (once)."""
        if self._survey is not None:
            return self._recorded().get(model, {})
        if model not in self._cells:  # each model is planned by one thread: no other computes it meanwhile
            self._cells[model] = computed_cells_of(self.store, self.fleet, model, self.cache, self.targets)
        return self._cells[model]

    @property
    def survey(self) -> StoreSurvey | None:
        """The survey of every model it read (None: it listed one export's plans and its model's pointers)."""
        return self._survey

    def save(self) -> None:
        """Keep what was read in this machine's summary cache (with ``cache``)."""
        if self.cache is not None:
            self.cache.save()

    def _recorded(self) -> dict[str, dict[str, tuple[str, str | None]]]:
        """Every model's cells, at the first ask (a whole-store view only): as a cold ``trtfarm status`` has them.

        From each model's state record where it is current (one object each), the others computed together from
        the survey (their pointers and manifests read many at once).
        """
        if self._survey is None:
            return {}
        with self._lock:  # the survey is read under the lock only
            if self._records is None:
                self._records = _cells(self._survey, self.fleet, self._survey.models(), self.targets)
            return self._records


def _cells(survey: StoreSurvey, fleet: Fleet, models: list[str],
           targets: list[ResolvedTarget] | None = None) -> dict[str, dict[str, tuple[str, str | None]]]:
    """``models``' cells (model -> target -> (state, manifest)): recorded where current, else computed."""
    from trtfarm.state.cells import computed_cells, pairs_of
    from trtfarm.state.expected import expected_exports
    from trtfarm.state.views import current_records

    current, stale = current_records(survey, models)
    out = {m: {t: _said(c) for t, c in s.cells.items()} for m, s in current.items()}
    expected = expected_exports(survey, stale) if stale else {}
    pairs = pairs_of(expected, select_targets(fleet) if targets is None else targets) if expected else []
    for c in computed_cells(survey, pairs, datetime.now(timezone.utc), fleet, survey.recorded(stale)) if pairs else []:
        out.setdefault(c.model, {})[c.target] = (c.state, c.manifest)
    return out


def _said(kept) -> tuple[str, str | None]:
    """(state, manifest) of a recorded cell: a record's cell kept whole (``.cell``), or its fields beside the rest."""
    cell = getattr(kept, "cell", kept)
    return cell.state, cell.manifest


def computed_cells_of(store: Store, fleet: Fleet, model: str, cache: SummaryCache | None = None,
                      targets: list[ResolvedTarget] | None = None) -> dict[str, tuple[str, str | None]]:
    """One model's cells (target -> (state, manifest)), as ``trtfarm status`` has them, from the model's survey."""
    survey = StoreSurvey(store, cache, runs=True, model=model, keep_parsed=True)  # releases judged as read
    return _cells(survey, fleet, [model], targets).get(model, {})
