"""Where every model x target stands: one function from the store's records, read by every view.

For each model's next build (``state/expected.py``) and each target it builds for:

- ``released``: the release pointer names the build the export and the fleet give now, and a serving host would
  take it (the chain from pointer to plan is checked as ``pull`` checks it: ``release_check.served_release``);
- ``pending``: that build is published but not released (its engine check waits for a worker with its GPU);
- ``failed``: that build was published with a failed check, or the latest run that tried it failed (since when);
- ``stale``: something older is released (a newer export, a fleet change: the reason names what changed);
- ``refused``: the release pointer names a plan serving hosts refuse (tampered, another identity, an untrusted or
  missing signature where keys are trusted): ``pull`` says the same words, whatever build is pending or failed;
- ``damaged``: an object the state is made from is not what trtfarm wrote (named, with the fix);
- ``missing``: nothing is released for the target.

``signed`` says what was verified: ``signed`` (by a key the fleet trusts), ``unverified`` (a signature is there, but
no trusted keys are configured here), ``unsigned``, or ``refused``. The cells are the same whether they were computed
now from the records or read from the state the executor recorded in the store (``state/<model>.json``): a record is
used only while every object it was computed from is listed at the version it saw.

Beside the cells, what every channel pointer references (``served.release_refs``): a record keeps it, gc reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial

from trtfarm import layout
from trtfarm.signing.keys import TrustedKeys
from trtfarm.state.cells import (
    RUNS_BACK,
    Pair,
    age_of,
    computed_cells,
    in_candidate,
    object_versions,
    pairs_of,
    refused_cell,
)
from trtfarm.state.expected import ExpectedExport, digest_part
from trtfarm.state.record import STATE_FORMAT, KeptCell, RecordedRelease, RecordedState, now_iso
from trtfarm.state.served import (
    expired,
    has_release,
    one_line,
    release_key_of,
    release_refs,
    served_check,
    serving_digest,
)
from trtfarm.state.summaries import ManifestSummary, shared_ref
from trtfarm.state.survey import StoreSurvey
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.fleetview import FleetStatus, ReleaseRef, TargetStatus

KEPT = "status"  # the summary cache's kind for the states this machine computed (``kept_states``)


def target_print(t: ResolvedTarget, x: ExpectedExport) -> str:
    """What a target adds to its cell's answer: its id, build settings, toolchain (serving images) and policy."""
    settings, toolchain = digest_part(t)
    parts = [t.id, t.gpu_key, t.release_on, t.toolchain_label, settings.hex(), toolchain.hex(),
             t.toolchain.model_dump_json(), str(x.covers(t.id))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def fleet_status(survey: StoreSurvey, expected: dict[str, ExpectedExport], fleet: Fleet, *,
                 trust: TrustedKeys | None = None, target_ids: list[str] | None = None,
                 now: datetime | None = None, recorded: dict[str, RecordedState] | None = None,
                 previous: dict[str, RecordedState] | None = None, keep: Iterable[str] = ()) -> FleetStatus:
    """The matrix of ``expected``'s models x the fleet's targets (``target_ids``: only those).

    ``recorded``: the state records of models whose records are current (``StoreSurvey.model_inputs`` matches);
    a cell is taken from one when its target's part is the same too, else computed from the records.
    ``previous``: the older records of other models (what their released plan objects were when recorded).
    ``keep``: models whose state, computed here for every target of the fleet, this machine keeps (``kept_states``).
    """
    now = now or datetime.now(timezone.utc)
    targets = select_targets(fleet, target_ids or None)
    pairs = pairs_of(expected, targets)
    found: dict[tuple[str, str], TargetStatus] = {}
    hints = {k.hint for k in trust.keys} if trust else set()
    prints: dict[tuple[str, bool], str] = {}  # a target's print is the same for every model that builds for it
    serving = serving_digest(fleet)
    for p in pairs:
        state = (recorded or {}).get(p.model)
        kept = state.cells.get(p.target.id) if state else None
        if kept is None or (kept.cell.model, kept.cell.target) != (p.model, p.target.id):
            continue
        if kept.target_print == _print(prints, p):
            taken = _from_record(kept, now, trust is not None and hints, state.serving == serving)
            if taken is not None:
                found[p.model, p.target.id] = taken
    todo = [p for p in pairs if (p.model, p.target.id) not in found]
    computed, timed = channel_cells(survey, todo, computed_cells(survey, todo, now, fleet, previous), now, fleet)
    found.update({(c.model, c.target): c for c in computed})
    whole = set(keep) - {m for m, _ in found.keys() - {(p.model, p.target.id) for p in todo}}
    if whole and not target_ids:  # models whose every cell was computed here
        _keep_states(survey, fleet, [p for p in pairs if p.model in whole], found, prints, timed)
    cells = [_signed(survey, found[p.model, p.target.id], trust, fleet, now) for p in pairs]
    problems = [*survey.problems, *(x for s in (recorded or {}).values() for x in s.problems)]
    return FleetStatus(sorted(expected), [t.id for t in targets], cells, now.isoformat(timespec="seconds"),
                       survey.store.location, sorted(set(problems)))  # in one order however they were found


def _print(prints: dict[tuple[str, bool], str], p: Pair) -> str:
    """The pair's ``target_print``, made once per target (it is the same for every model that builds for it)."""
    kept = (p.target.id, p.export.covers(p.target.id))
    if kept not in prints:
        prints[kept] = target_print(p.target, p.export)
    return prints[kept]


def _kept_cell(survey: StoreSurvey, p: Pair, c: TargetStatus, prints: dict[tuple[str, bool], str], timed: bool,
               **verified) -> KeptCell:
    """The cell as a state record keeps it: itself (less its age), its target's print and its objects' versions."""
    versions = dict(zip(("manifest_version", "plan_version"), object_versions(survey, c.manifest),
                        strict=True)) if c.manifest else {}
    return KeptCell(cell=c.aged(None), target_print=_print(prints, p), timed=timed, **verified, **versions)


def _recorded_manifests(survey: StoreSurvey, pairs: list[Pair], cells: Iterable[TargetStatus],
                        values: dict) -> dict[str, tuple[str, list]]:
    """The summaries of the manifests ``cells`` were computed from, by key, as a state record keeps them.

    Each target's build now and each released one (what a what-if reads of the model): its listed version and its
    summary as a row, whose shared fields go to ``values``.
    """
    pointers = survey.pointer_summaries({p.pointer_key for p in pairs})  # read already, by the cells
    keys = {c.manifest for c in cells if c.manifest} | {ptr.manifest for ptr in pointers.values()}
    folders = {layout.folder_of(k) for k in keys if layout.manifest_key(layout.folder_of(k)) == k}  # own manifests
    out = {}
    for prefix, summary in survey.manifests(folders).items():
        version = object_versions(survey, layout.manifest_key(prefix))[0]
        if version:
            out[layout.manifest_key(prefix)] = (version, summary.to_row(partial(_share, values)))
    return out


def _share(values: dict, value) -> str:
    """``value`` kept once among a record's shared values; its key there (``shared_ref``)."""
    ref = shared_ref(value)
    values.setdefault(ref, value)
    return ref


def _keep_states(survey: StoreSurvey, fleet: Fleet, pairs: list[Pair], found: dict[tuple[str, str], TargetStatus],
                 prints: dict[tuple[str, bool], str], timed: set[tuple[str, str]]) -> None:
    """Keep on this machine the state computed from the store's objects of each model of ``pairs`` (all its cells).

    What a state record would say, without its signatures' verdicts (a reader trusting keys checks each release).
    """
    by_model: dict[str, list[Pair]] = {}
    for p in pairs:
        by_model.setdefault(p.model, []).append(p)
    for model, mine in by_model.items():
        inputs = survey.model_inputs(model, RUNS_BACK)
        state = RecordedState(model=model, inputs=inputs, written_at=now_iso(), by="this machine",
                              expected=mine[0].export.to_record(),
                              cells={p.target.id: _kept_cell(survey, p, found[model, p.target.id], prints,
                                                             (model, p.target.id) in timed) for p in mine},
                              problems=[x for x in survey.problems if f"/{model}/" in x],
                              serving=serving_digest(fleet))
        survey.cache.put(KEPT, model, _kept_version(survey, model, fleet, inputs), state)


def _kept_version(survey: StoreSurvey, model: str, fleet: Fleet, inputs: str | None = None) -> str:
    """Everything a model's state depends on beside its cells' targets (``target_print``), as one digest.

    Its objects (``model_inputs``), its state record in the store (a plan rewritten since that record saw it is
    refused), the fleet's serving images (what a serving host checks of each release) and the record's format.
    """
    listed = survey.states.get(model)
    parts = [str(STATE_FORMAT), inputs or survey.model_inputs(model, RUNS_BACK), listed.version if listed else "-",
             serving_digest(fleet)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def kept_states(survey: StoreSurvey, models: Iterable[str], fleet: Fleet) -> dict[str, RecordedState]:
    """The states this machine computed before for ``models``, where nothing they were computed from has changed.

    For models without a current state record in the store: a view reads them as it reads a record (a cell whose
    target changed since is computed anew), so a warm view costs what a view of recorded models does.
    """
    out = {}
    for model in models:
        state = survey.cache.get(KEPT, model, _kept_version(survey, model, fleet), RecordedState)
        if state is None or state.model != model:
            continue
        try:
            ExpectedExport.from_record(state.expected)
        except TypeError:  # kept by a trtfarm of another shape: computed again
            continue
        out[model] = state
    return out


def model_state(survey: StoreSurvey, model: str, expected: ExpectedExport, fleet: Fleet, by: str,
                targets: list[ResolvedTarget], trust: TrustedKeys | None = None) -> RecordedState:
    """The state record of ``model`` for ``targets`` (the fleet's), as runs store it (computed from the records).

    With ``trust`` (the fleet's trusted keys), each release is also verified as a host trusting them would: the
    record says which keys signed it and until when, so such a host need not read its objects.
    """
    now = datetime.now(timezone.utc)
    pairs = pairs_of({model: expected}, targets)
    computed, timed = channel_cells(survey, pairs, computed_cells(survey, pairs, now, fleet, survey.recorded([model])),
                                    now, fleet)
    cells = {c.target: c for c in computed}
    recorded, prints, values = {}, {}, {}
    manifests = _recorded_manifests(survey, pairs, cells.values(), values)
    for p in pairs:
        c = cells[p.target.id]
        verified = {}
        if trust is not None and has_release(c):
            check = served_check(survey, release_key_of(c), trust, fleet, now)
            verified = {"verified": "refused", "verified_reason": check.refusal} if check.refusal else \
                {"verified": "signed", "keys": list(check.keys), "expires_at": check.expires}
        recorded[p.target.id] = _kept_cell(survey, p, c, prints, (model, p.target.id) in timed, **verified)
    releases = {r.pointer: RecordedRelease(manifest=r.manifest, refusal=r.refusal)
                for r in release_refs(survey, survey.channel_pointers(model), now, fleet)}
    return RecordedState(model=model, inputs=survey.model_inputs(model, RUNS_BACK), written_at=now_iso(), by=by,
                         store=survey.store.uri, shape=survey.model_inputs(model, RUNS_BACK, "size"),
                         expected=expected.to_record(), cells=recorded, releases=releases,
                         problems=[x for x in survey.problems if f"/{model}/" in x],
                         trusted_keys=sorted(k.hint for k in trust.keys) if trust else None,
                         serving=serving_digest(fleet), manifests=manifests, summary_layout=ManifestSummary.layout(),
                         summary_values=values)


def _from_record(kept: KeptCell, now: datetime, hints: set[str] | bool, serving: bool) -> TargetStatus | None:
    """The cell a record holds, for a reader trusting the keys ``hints`` (False: none); None to compute it anew.

    ``serving``: whether the record's releases (and candidate pointers) were checked against the fleet's serving
    images as they are now (else they are checked again). A cell whose candidate verdict changes with time alone is
    computed anew. Without trusted keys the record's own words stand (it never says signed). With them, a release is
    signed when the record says the keys that signed it are all trusted here and its claim has not expired; any
    other release is checked from the store's objects.
    """
    c = kept.cell.aged(age_of(kept.cell.released_at, now))
    if kept.timed or ((has_release(c) or c.candidate) and not serving):
        return None
    if not hints or not has_release(c):
        return c
    if kept.verified == "signed" and kept.keys and set(kept.keys) <= hints and not expired(kept.expires_at, now):
        return TargetStatus(**{**c.__dict__, "signed": "signed"})
    return None


def _signed(survey: StoreSurvey, c: TargetStatus, trust: TrustedKeys | None, fleet: Fleet,
            now: datetime) -> TargetStatus:
    """The cell with what a serving host trusting ``trust`` would say of its release (cells with a pointer)."""
    if trust is None or not has_release(c) or c.signed == "signed":
        return c
    refusal = served_check(survey, release_key_of(c), trust, fleet, now).refusal
    if refusal is None:
        return TargetStatus(**{**c.__dict__, "signed": "signed"})
    return refused_cell(c, refusal)


def _candidate_key(survey: StoreSurvey, p: Pair) -> str | None:
    """The key of the pair's candidate channel pointer, when the listing shows one."""
    if not survey.candidates:  # no candidate pointer listed at all: no key to make per cell
        return None
    key = layout.channel_key(p.model, p.target.gpu_key, p.target.toolchain_label, "candidate")
    return key if key in survey.candidates else None


def channel_cells(survey: StoreSurvey, pairs: list[Pair], cells: list[TargetStatus], now: datetime,
                  fleet: Fleet) -> tuple[list[TargetStatus], set[tuple[str, str]]]:
    """``cells`` (of ``pairs``, in order) with their candidate channel's columns, as a record keeps them.

    And the (model, target) pairs whose candidate verdict may change with time alone (a soak in progress), which a
    record keeps but no view takes from it. Read only for the targets the listing shows a candidate pointer of.
    """
    keys = [_candidate_key(survey, p) for p in pairs]
    if not any(keys):
        return cells, set()
    refs = {r.pointer: r for r in release_refs(survey, [k for k in keys if k], now, fleet)}
    out, timed = [], set()
    for p, c, key in zip(pairs, cells, keys, strict=True):
        cell, moves = _with_candidate(survey, p, c, now, refs[key]) if key else (c, False)
        out.append(cell)
        if moves:
            timed.add((p.model, p.target.id))
    return out, timed


def _with_candidate(survey: StoreSurvey, p: Pair, c: TargetStatus, now: datetime,
                    ref: ReleaseRef) -> tuple[TargetStatus, bool]:
    """The cell with its candidate channel beside it (the build and its gates' verdict); whether time moves it.

    The verdict is ``releases.gates``', the rule ``promote`` applies. A candidate pointer serving hosts refuse
    (``ref``: ``release_refs``) is ``damaged``.
    """
    if ref.refusal:
        return replace(c, candidate=layout.short_ref(ref.manifest) if ref.manifest else "?",
                       candidate_verdict="damaged", candidate_detail=ref.refusal), False
    from trtfarm.errors import CorruptObject
    from trtfarm.publishing.release_check import read_pointer
    from trtfarm.releases.gates import candidate_gates

    try:
        pointer, _ = read_pointer(survey.store, ref.pointer)  # the gates read the whole pointer
    except CorruptObject as damaged:
        return replace(c, candidate="?", candidate_verdict="damaged", candidate_detail=str(damaged)), False
    if pointer is None:
        return c, False
    try:  # the gates compare with stable's release: a damaged one leaves them unjudged
        cand = candidate_gates(survey.store, layout.parse_channel_key(ref.pointer)[0], pointer, p.target.release_on,
                               now)
    except CorruptObject as damaged:
        return replace(c, candidate=layout.short_ref(pointer.manifest), candidate_verdict="damaged",
                       candidate_detail=one_line(str(damaged))), False
    deciding = [g for g in cand.gates if g.verdict == cand.verdict]  # what it waits on, or fails on
    return replace(in_candidate(c, pointer.manifest, cand.verdict, [(g.name, g.detail) for g in deciding]),
                   candidate=layout.short_ref(pointer.manifest), candidate_verdict=cand.verdict,
                   candidate_detail="; ".join(f"{g.name}: {g.detail}" for g in deciding)), \
        any(g.timed for g in cand.gates)
