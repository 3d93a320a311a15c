"""Each (model, target) cell computed from the store's objects: its pointer, manifests and runs.

``state/status.py`` takes a cell from a current state record where there is one, and asks ``computed_cells`` for
the rest: a few models at a time, each release judged as ``pull`` judges it (``state/served.py``), from the pointer
and manifest the cell was computed from where this view read them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property

from trtfarm import layout
from trtfarm.releases.rules import RELEASABLE
from trtfarm.state.expected import ExpectedExport, digest_part, stale_changes
from trtfarm.state.record import RecordedState, in_parts
from trtfarm.state.served import (
    has_release,
    one_line,
    read_release,
    refusals,
    release_key_of,
    remembered_check,
    served_check,
)
from trtfarm.state.summaries import ManifestSummary, OutcomeSummary, PointerSummary
from trtfarm.state.survey import StoreSurvey
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget
from trtfarm.vocabulary.fleetview import NOTHING_RELEASED, TargetStatus
from trtfarm.vocabulary.plan_gate import held_fix

RUNS_BACK = 20  # older runs read to find since when a target fails
CHUNK_PAIRS = 1000  # pairs whose objects are read, judged and let go together (some 20 MB of parsed manifests)


@dataclass(frozen=True)
class Pair:
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


def age_of(at: str | None, now: datetime) -> float | None:
    """Seconds from the ISO time ``at`` to ``now`` (None: no time, or one that does not parse)."""
    if not at:
        return None
    try:
        then = datetime.fromisoformat(at)
    except ValueError:
        return None
    return round((now - (then if then.tzinfo else then.replace(tzinfo=timezone.utc))).total_seconds(), 1)


def pairs_of(expected: dict[str, ExpectedExport], targets: list[ResolvedTarget]) -> list[Pair]:
    """Each model of ``expected`` with each of ``targets`` its build spec covers, by model."""
    parts = {t.id: digest_part(t) for t in targets}
    return [Pair(model, t, expected[model], parts[t.id]) for model in sorted(expected) for t in targets
            if expected[model].covers(t.id)]


def computed_cells(survey: StoreSurvey, pairs: list[Pair], now: datetime, fleet: Fleet,
           previous: dict[str, RecordedState] | None = None) -> list[TargetStatus]:
    """The cells of ``pairs``, from their pointers, manifests and runs (read once per version, many at once).

    ``previous``: older state records of these models, which say what a released plan object was when recorded.
    A few models at a time (``CHUNK_PAIRS``): the objects a chunk reads are judged as a serving host would (its
    releases) and let go before the next chunk is read.
    """
    by_model: dict[str, list[Pair]] = {}
    for p in pairs:
        by_model.setdefault(p.model, []).append(p)
    out, chunk = [], []
    for mine in by_model.values():
        chunk += mine
        if len(chunk) >= CHUNK_PAIRS:
            out += _chunk_cells(survey, chunk, now, fleet, previous)
            chunk = []
    return out + (_chunk_cells(survey, chunk, now, fleet, previous) if chunk else [])


def _chunk_cells(survey: StoreSurvey, pairs: list[Pair], now: datetime, fleet: Fleet,
                 previous: dict[str, RecordedState] | None) -> list[TargetStatus]:
    """``computed_cells`` of a few models.

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
    keys = [_asked_of(p, c, pointers) for p, c in zip(pairs, cells, strict=True)]
    said: dict[str, str | None] = {}
    read = survey.parsed or {}  # what this view read and kept parsed (``keep_parsed``), by key
    for key in dict.fromkeys(k for k in keys if k):
        kept = remembered_check(survey, key, None, fleet, now, named=pointers.get(key))
        both = read_release(read, key) if kept is None else None
        if kept is not None:  # what this machine kept answers at once
            said[key] = kept.refusal
        elif both is not None:  # a release whose pointer and manifest this view read: judged from them, at once
            said[key] = served_check(survey, key, None, fleet, now, both).refusal
    read.clear()  # let go of what was read before the next models are
    said.update(refusals(survey, [k for k in keys if k and k not in said], fleet, now, pointers))  # the rest: read
    return [refused_cell(c if has_release(c) else _as_released(c, pointers[k], now), said[k])
            if k and said.get(k) else c for c, k in zip(cells, keys, strict=True)]


def _asked_of(p: Pair, c: TargetStatus, pointers: dict[str, PointerSummary]) -> str | None:
    """The pointer whose serving-host check a cell needs: its release's, or the one hosts are still served from.

    A build published but not released (pending), or failed, leaves hosts on the pointer: one they refuse is the
    cell's state, whatever waits.
    """
    if has_release(c):
        return release_key_of(c)
    return p.pointer_key if c.state in ("pending", "failed") and p.pointer_key in pointers else None


def _as_released(c: TargetStatus, ptr: PointerSummary, now: datetime) -> TargetStatus:
    """A pending or failed cell told by its release pointer instead: the manifest it names, and when it moved."""
    return replace(c, manifest=ptr.manifest, released_at=ptr.at, age_s=age_of(ptr.at, now), since=None,
                   precision=None, engine=None)


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
    if not has_release(c) or seen is None or seen.cell.manifest != c.manifest or seen.plan_version is None:
        return c
    manifest_version, plan_version = object_versions(survey, c.manifest)
    if manifest_version != seen.manifest_version or plan_version in (None, seen.plan_version) or \
            in_parts(plan_version):  # an ETag of parts: a bucket copy with other parts changes it
        return c
    return refused_cell(c, f"the plan object {layout.plan_key(layout.folder_of(c.manifest))} was rewritten after it "
                       "was published (its manifest is unchanged), so its sha256 no longer matches; `trtfarm build` "
                       "rebuilds it")


def in_candidate(c: TargetStatus, candidate: str, verdict: str, gates: list[tuple[str, str]]) -> TargetStatus:
    """A pending cell whose build the candidate pointer (manifest key ``candidate``) names: it waits for promotion.

    Its build is released, to candidate, so its engine check or release policy is not what it waits for: the gates
    ``promote`` applies are, ``gates`` those (name, detail) that give the candidate its ``verdict``.
    """
    if c.state != "pending" or c.manifest != candidate or verdict not in ("waits", "holds", "fails"):
        return c
    promote = f"`trtfarm promote {c.model}`"
    named = " and ".join(name for name, _ in gates)
    details = "; ".join(detail if len(gates) == 1 else f"{name}: {detail}" for name, detail in gates)
    plural = "s" if len(gates) > 1 else ""
    why = {"waits": f"waits for promotion on its {named} gate{plural} ({details}); {promote} moves it to stable "
                    "once its gates hold",
           "holds": f"its promotion gates hold; {promote} moves it to stable",
           "fails": f"promotion fails on its {named} gate{plural} ({details}); {promote} will not move it to stable"}
    return replace(c, reason=f"in candidate, not stable: {why[verdict]}")


def refused_cell(c: TargetStatus, why: str) -> TargetStatus:
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


def _cell(survey: StoreSurvey, p: Pair, ptr: PointerSummary | None, manifests: dict[str, ManifestSummary],
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
                                    signed="refused", released_at=ptr.at, age_s=age_of(ptr.at, now))
            note = f"released on build; engine check pending on {current.gpu_name}" \
                if current.engine == "pending" else ""
            return TargetStatus(**facts, state="released", reason=note, released_at=ptr.at, age_s=age_of(ptr.at, now),
                                signed=_unverified(survey, p.prefix, current))
        if current.failed:
            return TargetStatus(**facts, state="failed", reason=f"published for diagnosis: {current.failed[0]}",
                                since=current.created_at)
        if ptr is not None and ptr.action == "rollback":
            return TargetStatus(**facts, state="stale", reason=f"rolled back to {layout.short_ref(ptr.manifest)} by "
                                f"{ptr.by}: {ptr.reason}", released_at=ptr.at, age_s=age_of(ptr.at, now))
        if current.gate not in RELEASABLE:  # nothing unjudged is released: a trial until held-out data or an override
            return TargetStatus(**facts, state="pending", reason=f"held as a trial: {current.gate_text}; fix: "
                                f"{held_fix(key)}", since=current.created_at)
        why = f"engine check pending on {current.gpu_name} (release_on: {t.release_on})" \
            if current.engine == "pending" else f"published, not released ({t.release_on} policy)"
        return TargetStatus(**facts, state="pending", reason=why, since=current.created_at)
    outcome, since = latest or (None, None)
    if since is not None:  # the newest run failed the build this target needs now
        return TargetStatus(**base, state="failed", reason=one_line(outcome.reason) or "failed", since=since)
    if ptr is not None:
        released = manifests.get(layout.folder_of(ptr.manifest))
        facts = {**base, "manifest": ptr.manifest, "released_at": ptr.at, "age_s": age_of(ptr.at, now),
                 "precision": released.recipe if released else None, "engine": released.engine if released else None}
        return TargetStatus(**facts, state="stale", reason=_stale_reason(p, released))
    skipped = f"skipped by the latest run: {one_line(outcome.reason)}" if outcome and outcome.status == "skipped" \
        else None
    return TargetStatus(**base, state="missing", reason=x.unknown or skipped or NOTHING_RELEASED)


def _stale_reason(p: Pair, released: ManifestSummary | None) -> str:
    if p.export.unknown:
        return p.export.unknown
    if released is None:
        return "the released plan's manifest is not in the store; a run rebuilds it"
    return stale_changes(released, p.export, p.target)


def _applies(o: OutcomeSummary, p: Pair, run_time: float) -> bool:
    """Whether a run's failure is of the build this target needs now."""
    if o.build_digest is not None and p.digest is not None:
        return o.build_digest == p.digest
    registered = age_of(p.export.registered_at, datetime.fromtimestamp(run_time, timezone.utc))
    return registered is None or registered >= 0  # a record without its digest: a failure since the export


def _latest(survey: StoreSurvey, pairs: list[Pair]) -> dict[tuple[str, str], tuple[OutcomeSummary, str | None]]:
    """Each pair's newest stored outcome, and for a failure of the build it needs now, since when it fails."""
    runs = {p.model: survey.runs.get(p.model, [])[:RUNS_BACK] for p in pairs}
    newest = survey.outcomes((r[0][1].key, r[0][1]) for r in runs.values() if r)

    def outcome(p: Pair, obj, outcomes: dict) -> OutcomeSummary | None:
        return next((o for o in outcomes.get(obj.key, []) if o.target == p.target.id), None)

    def failed(p: Pair, obj, outcomes: dict) -> bool:
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
