"""The fleet views' entry points: ``trtfarm plan``, ``farm run --dry-run``, ``trtfarm status`` and ``gc`` call these.

Each opens one ``StoreSurvey`` (listings, and a summary cache on this machine), finds each model's next build, and
returns typed results. None writes to the store.
"""

from __future__ import annotations

from dataclasses import replace
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
from trtfarm.vocabulary.fleetview import (
    RUN_BUILDS,
    FleetDecisions,
    FleetStatus,
    ReleaseRef,
    RunDecision,
    TargetDecision,
)


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
def dry_run(store: Store, fleet: Fleet, exports: list[ExportRef], decided: list[RunDecision],
            refused: dict[str, str] | None = None, *, targets: list[str] | None = None, precision: str | None = None,
            force: bool = False, survey: StoreSurvey | None = None) -> FleetDecisions:
    """What a run of ``exports`` would do now (``farm run --dry-run``): its planner's ``decided``, explained.

    Each decision is the planner's (``planning/dry_run.py``); the what-if adds what it knows of each build (what
    changed against the build it replaces, an estimate). A build the what-if would keep (the listings show it
    published, yet its cell is not released: damaged, refused) is estimated as a forced rebuild. ``refused``: the
    models the planner refuses, and why. ``survey``: the planner's survey of every model (``Planned.view.survey``):
    the store is not read again, and the what-if sees the store the planner saw; None: one is made.
    """
    survey = survey or survey_of(store, runs=True)
    expected = recorded_exports(survey, [e.name for e in exports], precision, {e.name: e for e in exports})
    found = decide_fleet(survey, expected, fleet, fleet, baseline="store", target_ids=targets, force=force)
    by_pair = {(d.model, d.target): d for d in found.decisions}
    rebuilt = {(r.model, r.target) for r in decided if r.run in RUN_BUILDS and (r.model, r.target) in by_pair
               and by_pair[r.model, r.target].action == "keep"}
    if rebuilt:  # estimated as forced rebuilds: what the what-if knows of a build it does not call for
        forced = decide_fleet(survey, {m: expected[m] for m, _ in rebuilt}, fleet, fleet, baseline="store",
                              target_ids=sorted({t for _, t in rebuilt}), force=True)
        by_pair.update({(d.model, d.target): d for d in forced.decisions if (d.model, d.target) in rebuilt})
    survey.save()
    out = [_as_decided(by_pair.get((r.model, r.target)), r, (r.model, r.target) in rebuilt) for r in decided]
    return FleetDecisions(out, found.serving, {m: [d.target for d in out if d.model == m and d.action != "keep"]
                                    for m in dict.fromkeys(d.model for d in out if d.action != "keep")},
                          found.refused + [f"{m}: {why}" for m, why in (refused or {}).items()
                                           if not any(line.startswith(f"{m}: ") for line in found.refused)])


UNRELEASED = "published, not released yet: the run releases it when the target's policy allows"
NOT_SOUND = "listed as published, yet its cell is not this build released (status says what): the run rebuilds it"


def _as_decided(d: TargetDecision | None, r: RunDecision, forced: bool) -> TargetDecision:
    """The what-if's decision of a pair made to say what the planner decided (``r``), and why.

    ``forced``: ``d`` is the what-if's forced rebuild of a pair it would keep (its estimate stands, not its reason).
    """
    if d is None:  # a pair the what-if does not cover: the planner's word alone
        d = TargetDecision(r.model, r.target, "keep", build_digest=r.build_digest)
    if r.run in RUN_BUILDS:
        reasons = tuple(x for x in d.reasons if not x.startswith("--force")) if forced else \
            d.reasons if d.action != "keep" else ()
        first = r.reason or (NOT_SOUND if forced or d.action == "keep" else "")
        return replace(d, action="rebuild" if d.action == "keep" else d.action,
                       reasons=((first,) if first else ()) + reasons, build_digest=r.build_digest or d.build_digest,
                       published=False, run=r.run)
    if r.run == "precision first":
        return replace(d, reasons=(r.reason, *d.reasons), run=r.run)
    if r.run in ("up-to-date", "release"):
        kept = d.reasons if d.action == "keep" else ("published already",)
        kept = tuple(x for x in kept if x != UNRELEASED) + ((UNRELEASED,) if r.run == "release" else ())
        return replace(d, action="keep", reasons=kept, estimate_s=0.0, basis="nothing to build",
                       basis_kind="nothing to build", published=True, run=r.run)
    return replace(d, action="keep", reasons=(f"{r.run}: {r.reason}",), estimate_s=0.0, basis="nothing to build",
                   basis_kind="nothing to build", published=False, run=r.run)  # skipped, or failed (the gate)


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
    copied = {m: r.store for m, r in records.items() if m in stale and r.store not in (None, store.uri)
              and r.shape == survey.model_inputs(m, RUNS_BACK, "size")}  # the same objects, at other versions
    if copied:  # records of the store this one was copied from, whose objects' versions the copy did not keep
        found.notes.append(f"{len(copied)} of {len(names)} models' state records were written in "
                           f"{', '.join(sorted(set(copied.values())))} and this copy did not keep its objects' "
                           "versions (modification times, ETags): computed from the store's records once on this "
                           "machine; `trtfarm status --record` records them for this copy")
    if len(stale) > len(copied):
        found.notes.append(f"{len(stale) - len(copied)} of {len(names)} models have no state recorded in the store, "
                           "or one older than their objects: computed from the store's records (`trtfarm status "
                           "--record` records it; every run does)")
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
