"""The fleet views' entry points: ``trtfarm plan``, ``farm run --dry-run``, ``trtfarm status`` and ``gc`` call these.

Each opens one ``StoreSurvey`` (listings, and a summary cache on this machine), finds each model's next build, and
returns typed results. None writes to the store.
"""

from __future__ import annotations

from datetime import datetime, timezone

from trtfarm.errors import UserInputError
from trtfarm.layout import parse_model
from trtfarm.publishing.registry import resolve_model
from trtfarm.signing.keys import TrustedKeys
from trtfarm.state.cells import RUNS_BACK
from trtfarm.state.expected import ExpectedExport, expected_exports
from trtfarm.state.record import RecordedState
from trtfarm.state.served import recorded_refs, release_refs
from trtfarm.state.status import fleet_status, kept_states
from trtfarm.state.summaries import SummaryCache
from trtfarm.state.survey import StoreSurvey, collector_paused
from trtfarm.state.whatif import decide_fleet
from trtfarm.store import Store
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.vocabulary.fleetview import FleetDecisions, FleetStatus, ReleaseRef


def survey_of(store: Store, *, runs: bool = False, cache: bool = True, keep_parsed: bool = False) -> StoreSurvey:
    """The store's survey, with this machine's summary cache of it (``cache=False``: read everything afresh)."""
    return StoreSurvey(store, SummaryCache.for_store(store.uri) if cache else None, runs=runs,
                       keep_parsed=keep_parsed)


def _models(survey: StoreSurvey, names: list[str]) -> list[str]:
    """The models a view covers: those named (each must be known to the store), else every one."""
    known = survey.models()
    unknown = [m for m in names if m not in known]
    if unknown:
        from trtfarm.nearest import nearest_and_known

        raise UserInputError(f"no export, plan or release of {', '.join(map(repr, unknown))} in "
                             f"{survey.store.location}; {nearest_and_known(unknown[0], known, 'known models')}. Fix: "
                             "check the name (`trtfarm models ls`, `trtfarm plans`) and --store")
    return list(dict.fromkeys(names)) or known


@collector_paused()
def plan_fleet(store: Store, current: Fleet | None, proposed: Fleet, models: list[str] | None = None, *,
               targets: list[str] | None = None, cache: bool = True) -> FleetDecisions:
    """What ``proposed`` would build, keep and drop for ``models`` (all by default), against ``current``."""
    survey = survey_of(store, runs=True, cache=cache)
    expected = recorded_exports(survey, _models(survey, models or []))
    decisions = decide_fleet(survey, expected, current, proposed, target_ids=targets)
    survey.save()
    return decisions


@collector_paused()
def dry_run(store: Store, fleet: Fleet, exports: list[ExportRef], *, targets: list[str] | None = None,
            precision: str | None = None, force: bool = False) -> FleetDecisions:
    """What a run of ``exports`` would do now (``farm run --dry-run``): the fleet as it is, against the store."""
    survey = survey_of(store, runs=True)
    expected = recorded_exports(survey, [e.name for e in exports], precision, {e.name: e for e in exports})
    decisions = decide_fleet(survey, expected, fleet, fleet, baseline="store", target_ids=targets, force=force)
    survey.save()
    return decisions


def recorded_exports(survey: StoreSurvey, models: list[str], precision: str | None = None,
                     refs: dict[str, ExportRef] | None = None) -> dict[str, ExpectedExport]:
    """Each model's next build, from its current state record (one object) where that answers the question.

    Else (no current record, another recipe asked, another export named) from its export record and build spec
    (``expected_exports``).
    """
    current, _ = current_records(survey, models)
    usable = {m: s for m, s in current.items() if precision is None
              and (refs is None or refs[m].export_id in (None, s.expected.get("export_id")))}
    found = {m: ExpectedExport.from_record(s.expected) for m, s in usable.items()}
    rest = [m for m in models if m not in found]
    found.update(expected_exports(survey, rest, precision, {m: refs[m] for m in rest if m in refs} if refs else None))
    return found


def run_exports(store: Store, model: str | None) -> list[ExportRef]:
    """The exports a farm run of ``model`` builds: the named one (name, name@id or a URI), else every latest."""
    from trtfarm.publishing.registry import latest_exports

    return [resolve_model(store, model)] if model else latest_exports(store)


@collector_paused()
def status(store: Store, fleet: Fleet, models: list[str] | None = None, *, targets: list[str] | None = None,
           trust: TrustedKeys | None = None, now: datetime | None = None, cache: bool = True) -> FleetStatus:
    """The matrix of ``models`` (all by default) x the fleet's targets (``targets``: only those).

    Models whose state record in the store is current are read from it (one object each); the rest are computed from
    the store's records, and a note says how many. What this machine computed of them is kept in its cache, and read
    by the next view while none of its inputs changed (``status.kept_states``).
    """
    survey = survey_of(store, runs=True, cache=cache, keep_parsed=True)  # each release judged from its cell's reads
    names = _models(survey, models or [])
    records = survey.recorded(names)
    recorded, stale = current_records(survey, names, trust, records)
    kept = kept_states(survey, stale, fleet)  # this machine's own, computed by an earlier view
    known = {**kept, **recorded}
    expected = {m: ExpectedExport.from_record(s.expected) for m, s in known.items()}
    expected.update(expected_exports(survey, [m for m in names if m not in known]))
    found = fleet_status(survey, expected, fleet, trust=trust, target_ids=targets, now=now, recorded=known,
                         previous={m: r for m, r in records.items() if m not in recorded and r.model == m},
                         keep=[m for m in stale if m not in kept])
    survey.save()
    if stale:
        found.notes.append(f"{len(stale)} of {len(names)} models have no state recorded in the store, or one older "
                           "than their objects: computed from the store's records (`trtfarm status --record` "
                           "records it; every run does)")
    return found


def release_references(store: Store, trust: TrustedKeys | None = None, *, cache: bool = True) -> list[ReleaseRef]:
    """What every channel pointer in the store references, and which ones serving hosts refuse (``trtfarm gc``).

    The state model's answer (``served.release_refs``), for every pointer listed, whatever the fleet: from each
    model's state record where it is current and signed by a key in ``trust``, else from the pointers and manifests
    as the views compute it. Unlike a view, gc reads no unsigned record: one could say anything, and gc deletes what
    no pointer references.
    """
    survey = survey_of(store, runs=trust is not None, cache=cache)  # a record is current against the runs too
    keys = survey.channel_pointers()
    found: dict[str, ReleaseRef] = {}
    if trust is not None:
        current, _ = current_records(survey, sorted({parse_model(k) for k in keys}), trust)
        for model, state in current.items():
            found.update((r.pointer, r) for r in recorded_refs(state, survey.channel_pointers(model)) or [])
    rest = [k for k in keys if k not in found]
    found.update((r.pointer, r) for r in release_refs(survey, rest, datetime.now(timezone.utc)))
    survey.save()
    return [found[k] for k in keys]


def current_records(survey: StoreSurvey, models: list[str], trust: TrustedKeys | None = None,
                    records: dict[str, RecordedState] | None = None) -> tuple[dict[str, RecordedState], list[str]]:
    """The models whose state record is current (every object it was computed from unchanged), and the others.

    With ``trust`` a record counts only when a trusted key signed it (an unsigned one could say anything).
    ``records``: the models' records, read already.
    """
    records = survey.recorded(models) if records is None else records
    current = {}
    for m, state in records.items():
        if state.model != m or state.inputs != survey.model_inputs(m, RUNS_BACK) or not _signed_by(state, trust):
            continue
        try:
            ExpectedExport.from_record(state.expected)
        except TypeError:  # a record of another shape: computed from the store instead
            continue
        current[m] = state
    survey.know_manifests(current.values())  # the summaries of the manifests their cells name: read from them
    return current, [m for m in models if m not in current]


def _signed_by(state: RecordedState, trust: TrustedKeys | None) -> bool:
    """Whether a record may be read by a host trusting ``trust`` (without keys: any record)."""
    if trust is None:
        return True
    from trtfarm.layout import state_key
    from trtfarm.signing.bundle import SignatureRefused
    from trtfarm.signing.state_claim import verify_state

    try:
        # the record as it was written: a field it was written without (one added since) is not added to it
        verify_state(state.signature, state_key(state.model), state.model_dump(mode="json", exclude_unset=True), trust)
    except SignatureRefused:
        return False
    return True
