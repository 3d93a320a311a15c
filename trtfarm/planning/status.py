"""Where every model x target stands: one function from the store's records, read by every view.

For each model's next build (``planning/expected.py``) and each target it builds for:

- ``released``: the release pointer names the build the export and the fleet give now, and a serving host would
  take it (the chain from pointer to plan is checked as ``pull`` checks it: ``release_check.served_release``);
- ``pending``: that build is published but not released (its engine check waits for a worker with its GPU);
- ``failed``: that build was published with a failed check, or the latest run that tried it failed (since when);
- ``stale``: something older is released (a newer export, a fleet change: the reason names what changed);
- ``refused``: the release pointer names a plan serving hosts refuse (tampered, another identity, an untrusted or
  missing signature where keys are trusted): ``pull`` says the same words;
- ``damaged``: an object the state is made from is not what trtfarm wrote (named, with the fix);
- ``missing``: nothing is released for the target.

``signed`` says what was verified: ``signed`` (by a key the fleet trusts), ``unverified`` (a signature is there, but
no trusted keys are configured here), ``unsigned``, or ``refused``. The cells are the same whether they were computed
now from the records or read from the state the executor recorded in the store (``state/<model>.json``): a record is
used only while every object it was computed from is listed at the version it saw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property, partial

from trtfarm import layout
from trtfarm.planning.expected import ExpectedExport, digest_part, stale_changes
from trtfarm.planning.served import (
    expired,
    has_release,
    one_line,
    read_release,
    release_key_of,
    remembered_check,
    served_check,
    serving_digest,
)
from trtfarm.publishing.state_record import STATE_FORMAT, RecordedCell, RecordedState, now_iso
from trtfarm.publishing.summaries import ManifestSummary, OutcomeSummary, PointerSummary, shared_ref
from trtfarm.publishing.survey import READ_THREADS, StoreSurvey
from trtfarm.signing.keys import TrustedKeys
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.fleetview import NOTHING_RELEASED, FleetStatus, TargetStatus

RUNS_BACK = 20  # older runs read to find since when a target fails
CHUNK_PAIRS = 1000  # pairs whose objects are read, judged and let go together (some 20 MB of parsed manifests)
KEPT = "status"  # the summary cache's kind for the states this machine computed (``kept_states``)
CELL_FIELDS = ("target", "state", "reason", "released_at", "precision", "engine", "signed", "since", "manifest",
               "export")  # TargetStatus's fields as a state record keeps them (less the model and the age)


@dataclass(frozen=True)
class _Pair:
    """A (model, target) of the matrix; its build digest and keys made when a cell is computed (not from a record)."""

    model: str
    target: ResolvedTarget
    export: ExpectedExport
    part: tuple[bytes, bytes]  # the target's half of its build digests (``expected.digest_part``)

    @cached_property
    def digest(self) -> str | None:
        """The build the export and fleet give now (None: not computable before a run)."""
        return self.export.digest(self.target, self.part)

    @cached_property
    def prefix(self) -> str | None:
        """The plan folder of that build."""
        return self.export.prefix(self.target, self.digest) if self.digest else None

    @cached_property
    def pointer_key(self) -> str:
        """The target's release pointer."""
        return layout.release_key(self.model, self.target.gpu_key, self.target.toolchain_label)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _age(at: str | None, now: datetime) -> float | None:
    if not at:
        return None
    try:
        then = datetime.fromisoformat(at)
    except ValueError:
        return None
    return round((now - (then if then.tzinfo else then.replace(tzinfo=timezone.utc))).total_seconds(), 1)


def target_print(t: ResolvedTarget, x: ExpectedExport) -> str:
    """What a target adds to its cell's answer: its id, build settings, toolchain (serving images) and policy."""
    settings, toolchain = digest_part(t)
    parts = [t.id, t.gpu_key, t.release_on, t.toolchain_label, settings.hex(), toolchain.hex(),
             t.toolchain.model_dump_json(), str(x.covers(t.id))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _pairs(expected: dict[str, ExpectedExport], targets: list[ResolvedTarget]) -> list[_Pair]:
    parts = {t.id: digest_part(t) for t in targets}
    return [_Pair(model, t, expected[model], parts[t.id]) for model in sorted(expected) for t in targets
            if expected[model].covers(t.id)]


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
    pairs = _pairs(expected, targets)
    found: dict[tuple[str, str], TargetStatus] = {}
    hints = {k.hint for k in trust.keys} if trust else set()
    prints: dict[tuple[str, bool], str] = {}  # a target's print is the same for every model that builds for it
    serving = serving_digest(fleet)
    for p in pairs:
        state = (recorded or {}).get(p.model)
        cell = state.cells.get(p.target.id) if state else None
        if cell is None or cell.target != p.target.id:
            continue
        if cell.target_print == _print(prints, p):
            taken = _from_record(p.model, cell, now, trust is not None and hints, state.serving == serving)
            if taken is not None:
                found[p.model, p.target.id] = taken
    todo = [p for p in pairs if (p.model, p.target.id) not in found]
    found.update({(c.model, c.target): c for c in _cells(survey, todo, now, fleet, previous)})
    whole = set(keep) - {m for m, _ in found.keys() - {(p.model, p.target.id) for p in todo}}
    if whole and not target_ids:  # models whose every cell was computed here
        _keep_states(survey, fleet, [p for p in pairs if p.model in whole], found, prints)
    cells = [_with_candidate(survey, p, _signed(survey, found[p.model, p.target.id], trust, fleet, now), now)
             for p in pairs]
    problems = [*survey.problems, *(x for s in (recorded or {}).values() for x in s.problems)]
    return FleetStatus(sorted(expected), [t.id for t in targets], cells, now.isoformat(timespec="seconds"),
                       survey.store.location, sorted(set(problems)))  # in one order however they were found


def _print(prints: dict[tuple[str, bool], str], p: _Pair) -> str:
    """The pair's ``target_print``, made once per target (it is the same for every model that builds for it)."""
    kept = (p.target.id, p.export.covers(p.target.id))
    if kept not in prints:
        prints[kept] = target_print(p.target, p.export)
    return prints[kept]


def _recorded_cell(survey: StoreSurvey, p: _Pair, c: TargetStatus, prints: dict[tuple[str, bool], str],
                   **verified) -> RecordedCell:
    """The cell as a state record keeps it: its target's print, its words and its manifest's listed versions."""
    versions = dict(zip(("manifest_version", "plan_version"), object_versions(survey, c.manifest),
                        strict=True)) if c.manifest else {}
    return RecordedCell(target_print=_print(prints, p), **{f: getattr(c, f) for f in CELL_FIELDS}, **verified,
                        **versions)


def _recorded_manifests(survey: StoreSurvey, pairs: list[_Pair], cells: Iterable[TargetStatus],
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


def _keep_states(survey: StoreSurvey, fleet: Fleet, pairs: list[_Pair], found: dict[tuple[str, str], TargetStatus],
                 prints: dict[tuple[str, bool], str]) -> None:
    """Keep on this machine the state computed from the store's objects of each model of ``pairs`` (all its cells).

    What a state record would say, without its signatures' verdicts (a reader trusting keys checks each release).
    """
    by_model: dict[str, list[_Pair]] = {}
    for p in pairs:
        by_model.setdefault(p.model, []).append(p)
    for model, mine in by_model.items():
        inputs = survey.model_inputs(model, RUNS_BACK)
        state = RecordedState(model=model, inputs=inputs, written_at=now_iso(), by="this machine",
                              expected=mine[0].export.to_record(),
                              cells={p.target.id: _recorded_cell(survey, p, found[model, p.target.id], prints)
                                     for p in mine},
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
    pairs = _pairs({model: expected}, targets)
    cells = {c.target: c for c in _cells(survey, pairs, now, fleet, survey.recorded([model]))}
    recorded, prints, values = {}, {}, {}
    manifests = _recorded_manifests(survey, pairs, cells.values(), values)
    for p in pairs:
        c = cells[p.target.id]
        verified = {}
        if trust is not None and has_release(c):
            check = served_check(survey, release_key_of(c), trust, fleet, now)
            verified = {"verified": "refused", "verified_reason": check.refusal} if check.refusal else \
                {"verified": "signed", "keys": list(check.keys), "expires_at": check.expires}
        recorded[p.target.id] = _recorded_cell(survey, p, c, prints, **verified)
    return RecordedState(model=model, inputs=survey.model_inputs(model, RUNS_BACK), written_at=now_iso(), by=by,
                         expected=expected.to_record(), cells=recorded,
                         problems=[x for x in survey.problems if f"/{model}/" in x],
                         trusted_keys=sorted(k.hint for k in trust.keys) if trust else None,
                         serving=serving_digest(fleet), manifests=manifests, summary_layout=ManifestSummary.layout(),
                         summary_values=values)


def _from_record(model: str, cell: RecordedCell, now: datetime, hints: set[str] | bool,
                 serving: bool) -> TargetStatus | None:
    """The cell a record holds, for a reader trusting the keys ``hints`` (False: none); None to compute it anew.

    ``serving``: whether the record's releases were checked against the fleet's serving images as they are now
    (else a release is checked again). Without trusted keys the record's own words stand (it never says signed).
    With them, a release is signed when the record says the keys that signed it are all trusted here and its claim
    has not expired; any other release is checked from the store's objects.
    """
    c = TargetStatus(model=model, age_s=_age(cell.released_at, now), **{f: getattr(cell, f) for f in CELL_FIELDS})
    if has_release(c) and not serving:
        return None
    if not hints or not has_release(c):
        return c
    if cell.verified == "signed" and cell.keys and set(cell.keys) <= hints and not expired(cell.expires_at, now):
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
    return _refused(c, refusal)


def _cells(survey: StoreSurvey, pairs: list[_Pair], now: datetime, fleet: Fleet,
           previous: dict[str, RecordedState] | None = None) -> list[TargetStatus]:
    """The cells of ``pairs``, from their pointers, manifests and runs (read once per version, many at once).

    ``previous``: older state records of these models, which say what a released plan object was when recorded.
    A few models at a time (``CHUNK_PAIRS``): the objects a chunk reads are judged as a serving host would (its
    releases) and let go before the next chunk is read.
    """
    by_model: dict[str, list[_Pair]] = {}
    for p in pairs:
        by_model.setdefault(p.model, []).append(p)
    out, chunk = [], []
    for mine in by_model.values():
        chunk += mine
        if len(chunk) >= CHUNK_PAIRS:
            out += _chunk_cells(survey, chunk, now, fleet, previous)
            chunk = []
    return out + (_chunk_cells(survey, chunk, now, fleet, previous) if chunk else [])


def _chunk_cells(survey: StoreSurvey, pairs: list[_Pair], now: datetime, fleet: Fleet,
                 previous: dict[str, RecordedState] | None) -> list[TargetStatus]:
    """``_cells`` of a few models.

    With a survey that keeps what it parses (``keep_parsed``), each release read by this view is judged from the
    pointer and manifest its cell was computed from: ``pull``'s checks (``served_check``), not a second read.
    """
    newest = {r[0][1].key: r[0][1] for m in {p.model for p in pairs} if (r := survey.runs.get(m))}
    survey.outcomes(newest.items())  # each model's newest run, read whatever the cells need: its damage is named
    pointers = survey.pointer_summaries({p.pointer_key for p in pairs})
    wanted = {p.prefix for p in pairs if p.prefix and survey.published(p.prefix)}
    wanted |= {layout.folder_of(ptr.manifest) for ptr in pointers.values()}
    manifests = survey.manifests(wanted)
    latest = _latest(survey, [p for p in pairs if not (p.prefix and p.prefix in manifests)])
    cells = [_rewritten(survey, _cell(survey, p, pointers.get(p.pointer_key), manifests,
                                      latest.get((p.model, p.target.id)), now), previous)
             for p in pairs]
    refusals = {}
    for c in cells:  # what this machine kept answers at once; the rest is asked many at once
        key = release_key_of(c) if has_release(c) else None
        kept = remembered_check(survey, key, None, fleet, now, named=pointers.get(key)) if key else None
        if kept is not None:
            refusals[id(c)] = kept.refusal
    read = survey.parsed or {}  # what this view read and kept parsed (``keep_parsed``), by key
    for c in cells:  # releases whose pointer and manifest this view read: judged from them, at once
        both = read_release(read, release_key_of(c)) if has_release(c) and id(c) not in refusals else None
        if both is not None:
            refusals[id(c)] = served_check(survey, release_key_of(c), None, fleet, now, both).refusal
    read.clear()  # let go of what was read before the next models are
    asked = [c for c in cells if has_release(c) and id(c) not in refusals]  # the rest: read, many at once
    size = max(1, min(64, len(asked) // (READ_THREADS * 4)))  # a task per batch, as the survey reads
    batches = [asked[i:i + size] for i in range(0, len(asked), size)]
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for batch, answers in zip(batches, pool.map(lambda b: [
                served_check(survey, release_key_of(c), None, fleet, now).refusal for c in b], batches), strict=True):
            refusals.update(zip([id(c) for c in batch], answers, strict=True))
    return [_refused(c, refusals[id(c)]) if refusals.get(id(c)) else c for c in cells]


def _with_candidate(survey: StoreSurvey, p: _Pair, c: TargetStatus, now: datetime) -> TargetStatus:
    """The cell with its candidate channel beside it: the build and its gates' verdict.

    The verdict is ``planning.gates``', the rule ``promote`` applies; read only for the targets the listing shows a
    candidate pointer of.
    """
    if not survey.candidates:  # no candidate pointer listed at all: no key to make per cell
        return c
    key = layout.channel_key(p.model, p.target.gpu_key, p.target.toolchain_label, "candidate")
    if key not in survey.candidates:
        return c
    from trtfarm.errors import CorruptObject
    from trtfarm.planning.gates import candidate_gates
    from trtfarm.publishing.release_check import read_pointer

    try:
        pointer, _ = read_pointer(survey.store, key)
    except CorruptObject as damaged:
        return replace(c, candidate="?", candidate_verdict="damaged", candidate_detail=str(damaged))
    if pointer is None:
        return c
    cand = candidate_gates(survey.store, layout.parse_channel_key(key)[0], pointer, p.target.release_on, now)
    detail = "; ".join(f"{g.name}: {g.detail}" for g in cand.gates if g.verdict == cand.verdict)
    return replace(c, candidate=layout.short_ref(pointer.manifest), candidate_verdict=cand.verdict,
                   candidate_detail=detail)


def object_versions(survey: StoreSurvey, manifest_key: str) -> tuple[str | None, str | None]:
    """The listed versions of a plan folder's manifest and plan objects (None: not listed)."""
    objects = survey.folders.get(layout.folder_of(manifest_key), {})
    return tuple(objects[n].version if n in objects else None for n in (layout.MANIFEST_NAME, layout.PLAN_NAME))


def _rewritten(survey: StoreSurvey, c: TargetStatus, previous: dict[str, RecordedState] | None) -> TargetStatus:
    """The cell refused when its released plan object was rewritten after a state record saw it (same manifest).

    A plan is published create-only and never rewritten under an unchanged manifest; one replaced by bytes of the
    same size is otherwise seen only by ``pull``'s sha256 check, as it downloads.
    """
    old = (previous or {}).get(c.model)
    seen = old.cells.get(c.target) if old else None
    if not has_release(c) or seen is None or seen.manifest != c.manifest or seen.plan_version is None:
        return c
    manifest_version, plan_version = object_versions(survey, c.manifest)
    if manifest_version != seen.manifest_version or plan_version in (None, seen.plan_version):
        return c
    return _refused(c, f"the plan object {layout.plan_key(layout.folder_of(c.manifest))} was rewritten after it "
                       "was published (its manifest is unchanged), so its sha256 no longer matches; `trtfarm build` "
                       "rebuilds it")


def _refused(c: TargetStatus, why: str) -> TargetStatus:
    """The cell as serving hosts see it: refused, in their words."""
    return TargetStatus(**{**c.__dict__, "state": "refused", "signed": "refused",
                           "reason": f"serving hosts refuse it: {why}"})


def _plan_problem(survey: StoreSurvey, prefix: str, m: ManifestSummary) -> str | None:
    """What is wrong with a released folder's plan object as the listing shows it (``pull`` would fail on it)."""
    plan = survey.folders.get(prefix, {}).get(layout.PLAN_NAME)
    if plan is None:
        return f"the plan object {layout.plan_key(prefix)} is not in the store; `trtfarm build` rebuilds it"
    if plan.size != m.plan_bytes:
        return (f"the plan object {layout.plan_key(prefix)} is {plan.size} bytes, its manifest says {m.plan_bytes}: "
                "replaced outside trtfarm; `trtfarm build` rebuilds it")
    return None


def _unverified(survey: StoreSurvey, prefix: str, m: ManifestSummary | None) -> str | None:
    """What can be said of a plan folder's signature without trusted keys: ``unverified`` or ``unsigned``."""
    if m is None:
        return None
    return "unverified" if survey.signature_listed(prefix, m.manifest_sha256) else "unsigned"


def _cell(survey: StoreSurvey, p: _Pair, ptr: PointerSummary | None, manifests: dict[str, ManifestSummary],
          latest: tuple[OutcomeSummary, str | None] | None, now: datetime) -> TargetStatus:
    x, t = p.export, p.target
    base = {"model": p.model, "target": t.id, "export": x.label}
    damage = x.damaged or survey.damaged.get(p.pointer_key) or \
        (survey.damaged.get(layout.manifest_key(p.prefix)) if p.prefix else None)
    if damage:
        return TargetStatus(**base, state="damaged", reason=one_line(damage))
    current = manifests.get(p.prefix) if p.prefix else None
    if current is not None:
        key = layout.manifest_key(p.prefix)
        facts = {**base, "manifest": key, "precision": current.recipe, "engine": current.engine}
        if ptr is not None and ptr.manifest == key:
            gone = _plan_problem(survey, p.prefix, current)
            if gone:
                return TargetStatus(**facts, state="refused", reason=f"serving hosts refuse it: {gone}",
                                    signed="refused", released_at=ptr.at, age_s=_age(ptr.at, now))
            note = f"released on build; engine check pending on {current.gpu_name}" \
                if current.engine == "pending" else ""
            return TargetStatus(**facts, state="released", reason=note, released_at=ptr.at, age_s=_age(ptr.at, now),
                                signed=_unverified(survey, p.prefix, current))
        if current.failed:
            return TargetStatus(**facts, state="failed", reason=f"published for diagnosis: {current.failed[0]}",
                                since=current.created_at)
        if ptr is not None and ptr.action == "rollback":
            return TargetStatus(**facts, state="stale", reason=f"rolled back to {layout.short_ref(ptr.manifest)} by "
                                f"{ptr.by}: {ptr.reason}", released_at=ptr.at, age_s=_age(ptr.at, now))
        why = f"engine check pending on {current.gpu_name} (release_on: {t.release_on})" \
            if current.engine == "pending" else f"published, not released ({t.release_on} policy)"
        return TargetStatus(**facts, state="pending", reason=why, since=current.created_at)
    outcome, since = latest or (None, None)
    if since is not None:  # the newest run failed the build this target needs now
        return TargetStatus(**base, state="failed", reason=one_line(outcome.reason) or "failed", since=since)
    if ptr is not None:
        released = manifests.get(layout.folder_of(ptr.manifest))
        facts = {**base, "manifest": ptr.manifest, "released_at": ptr.at, "age_s": _age(ptr.at, now),
                 "precision": released.recipe if released else None, "engine": released.engine if released else None}
        return TargetStatus(**facts, state="stale", reason=_stale_reason(p, released))
    skipped = f"skipped by the latest run: {one_line(outcome.reason)}" if outcome and outcome.status == "skipped" \
        else None
    return TargetStatus(**base, state="missing", reason=x.unknown or skipped or NOTHING_RELEASED)


def _stale_reason(p: _Pair, released: ManifestSummary | None) -> str:
    if p.export.unknown:
        return p.export.unknown
    if released is None:
        return "the released plan's manifest is not in the store; a run rebuilds it"
    return stale_changes(released, p.export, p.target)


def _applies(o: OutcomeSummary, p: _Pair, run_time: float) -> bool:
    """Whether a run's failure is of the build this target needs now."""
    if o.build_digest is not None and p.digest is not None:
        return o.build_digest == p.digest
    registered = _age(p.export.registered_at, datetime.fromtimestamp(run_time, timezone.utc))
    return registered is None or registered >= 0  # a record without its digest: a failure since the export


def _latest(survey: StoreSurvey, pairs: list[_Pair]) -> dict[tuple[str, str], tuple[OutcomeSummary, str | None]]:
    """Each pair's newest stored outcome, and for a failure of the build it needs now, since when it fails."""
    runs = {p.model: survey.runs.get(p.model, [])[:RUNS_BACK] for p in pairs}
    newest = survey.outcomes((r[0][1].key, r[0][1]) for r in runs.values() if r)

    def outcome(p: _Pair, obj, outcomes: dict) -> OutcomeSummary | None:
        return next((o for o in outcomes.get(obj.key, []) if o.target == p.target.id), None)

    def failed(p: _Pair, obj, outcomes: dict) -> bool:
        o = outcome(p, obj, outcomes)
        return o is not None and o.status == "failed" and _applies(o, p, obj.modified)

    found = {(p.model, p.target.id): o for p in pairs if runs[p.model]
             and (o := outcome(p, runs[p.model][0][1], newest)) is not None}
    failing = [p for p in pairs if runs[p.model] and failed(p, runs[p.model][0][1], newest)]
    older = survey.outcomes((obj.key, obj) for m in {p.model for p in failing} for _, obj in runs[m][1:])
    out: dict[tuple[str, str], tuple[OutcomeSummary, str | None]] = {k: (o, None) for k, o in found.items()}
    for p in failing:
        since = runs[p.model][0][1].modified
        for _, obj in runs[p.model][1:]:
            if not failed(p, obj, older):
                break
            since = obj.modified
        out[p.model, p.target.id] = (found[p.model, p.target.id], _iso(since))
    return out

