"""Where every model x target stands, from the store, without writing to it.

For each model's next build (``planning/expected.py``) and each target it builds for:

- ``released``: the release pointer names the build the export and the fleet give now (with its age, precision,
  engine check and signature verdict);
- ``pending``: that build is published but not released (its engine check waits for a worker with its GPU);
- ``failed``: that build was published with a failed check, or the latest run that tried it failed (since when);
- ``stale``: something older is released (a newer export, a fleet change: the reason names what changed);
- ``missing``: nothing is released for the target.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone

from trtfarm import layout
from trtfarm.planning.expected import SAME_INPUTS, ExpectedExport, build_changes, digest_part
from trtfarm.publishing.summaries import ManifestSummary, OutcomeSummary, PointerSummary
from trtfarm.publishing.survey import StoreSurvey
from trtfarm.signing.keys import TrustedKeys
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.fleetview import NOTHING_RELEASED, FleetStatus, TargetStatus

RUNS_BACK = 20  # older runs read to find since when a target fails


@dataclass(frozen=True)
class _Pair:
    model: str
    target: ResolvedTarget
    export: ExpectedExport
    digest: str | None  # the build the export and fleet give now (None: not computable before a run)
    prefix: str | None  # its plan folder
    pointer_key: str


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


def fleet_status(survey: StoreSurvey, expected: dict[str, ExpectedExport], fleet: Fleet, *,
                 trust: TrustedKeys | None = None, target_ids: list[str] | None = None,
                 now: datetime | None = None) -> FleetStatus:
    """The matrix of ``expected``'s models x the fleet's targets (``target_ids``: only those)."""
    now = now or datetime.now(timezone.utc)
    targets = select_targets(fleet, target_ids or None)
    pairs = []
    parts = {t.id: digest_part(t) for t in targets}
    for model in sorted(expected):
        x = expected[model]
        for t in targets:
            if x.covers(t.id):
                digest = x.digest(t, parts[t.id])
                pairs.append(_Pair(model, t, x, digest, x.prefix(t, digest) if digest else None,
                                   layout.release_key(model, t.gpu_key, t.toolchain_label)))
    stamp = ",".join(sorted(k.hint for k in trust.keys)) if trust else "-"
    by_model: dict[str, list[_Pair]] = {}
    for p in pairs:
        by_model.setdefault(p.model, []).append(p)
    found: dict[str, list[TargetStatus]] = {}
    prints = {m: _fingerprint(survey, ps, stamp) for m, ps in by_model.items()}
    for model, print_ in prints.items():
        rows = survey.cache.get("cells", model, print_)
        if rows is not None:
            found[model] = [_from_row(model, row, now) for row in rows]
    todo = [p for m, ps in by_model.items() if m not in found for p in ps]
    for c in _cells(survey, todo, trust, now):
        found.setdefault(c.model, []).append(c)
    for model in {p.model for p in todo}:  # what changed since the last view, for the next one
        survey.cache.put("cells", model, prints[model], [_to_row(c) for c in found[model]])
    cells = [c for m in by_model for c in found[m]]
    return FleetStatus(sorted(expected), [t.id for t in targets], cells, now.isoformat(timespec="seconds"),
                       survey.store.uri, list(dict.fromkeys(survey.problems)))


_CELL_FIELDS = ("target", "state", "reason", "released_at", "precision", "engine", "signed", "since", "manifest",
                "export")  # TargetStatus's fields in order, less the model and the age (computed when read)


def _to_row(c: TargetStatus) -> list:
    return [getattr(c, f) for f in _CELL_FIELDS]


def _from_row(model: str, row: list, now: datetime) -> TargetStatus:
    target, state, reason, released_at, *rest = row
    return TargetStatus(model, target, state, reason, released_at, _age(released_at, now), *rest)


def _fingerprint(survey: StoreSurvey, pairs: list[_Pair], trust: str) -> str:
    """What a model's cells depend on, from the listings alone; equal prints, equal cells.

    Its export, each target's build, release policy, release pointer and plan folder (by version), its newest run's
    outcomes, and the trusted keys.
    """
    x = pairs[0].export
    runs = survey.runs.get(pairs[0].model)
    parts = [x.label, x.onnx_digest, x.recipe, x.unknown or "", trust,
             f"{runs[0][1].key}@{runs[0][1].version}" if runs else ""]
    for p in pairs:
        pointer = survey.pointers.get(p.pointer_key)
        objects = survey.folders.get(p.prefix, {}) if p.prefix else {}
        manifest, plan = objects.get(layout.MANIFEST_NAME), objects.get(layout.PLAN_NAME)
        parts += [p.target.id, p.target.release_on, p.digest or "", pointer.version if pointer else "",
                  manifest.version if manifest else "", str(plan.size) if plan else ""]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _cells(survey: StoreSurvey, pairs: list[_Pair], trust: TrustedKeys | None, now: datetime) -> list[TargetStatus]:
    """The cells of ``pairs``, from their pointers, manifests and runs (read once per version, many at once)."""
    pointers = survey.pointer_summaries({p.pointer_key for p in pairs})
    wanted = {p.prefix for p in pairs if p.prefix and survey.published(p.prefix)}
    wanted |= {layout.folder_of(ptr.manifest) for ptr in pointers.values()}
    manifests = survey.manifests(wanted)
    latest = _latest(survey, [p for p in pairs if not (p.prefix and p.prefix in manifests)])
    cells = [_cell(p, pointers.get(p.pointer_key), manifests, latest.get((p.model, p.target.id)), now)
             for p in pairs]
    released = {layout.folder_of(c.manifest): manifests[layout.folder_of(c.manifest)]
                for c in cells if c.state == "released" and c.manifest}
    verdicts = survey.verdicts(released, trust)
    return [_signed(c, verdicts) for c in cells]


def _signed(c: TargetStatus, verdicts) -> TargetStatus:
    if c.state != "released" or not c.manifest:
        return c
    v = verdicts.get(layout.folder_of(c.manifest))
    return TargetStatus(**{**c.__dict__, "signed": v.status if v else None})


def _cell(p: _Pair, ptr: PointerSummary | None, manifests: dict[str, ManifestSummary],
          latest: tuple[OutcomeSummary, str | None] | None, now: datetime) -> TargetStatus:
    x, t = p.export, p.target
    base = {"model": p.model, "target": t.id, "export": x.label}
    current = manifests.get(p.prefix) if p.prefix else None
    if current is not None:
        key = layout.manifest_key(p.prefix)
        facts = {**base, "manifest": key, "precision": current.recipe, "engine": current.engine}
        if ptr is not None and ptr.manifest == key:
            note = f"released on build; engine check pending on {current.gpu_name}" \
                if current.engine == "pending" else ""
            return TargetStatus(**facts, state="released", reason=note, released_at=ptr.at, age_s=_age(ptr.at, now))
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
        return TargetStatus(**base, state="failed", reason=_one_line(outcome.reason) or "failed", since=since)
    if ptr is not None:
        released = manifests.get(layout.folder_of(ptr.manifest))
        facts = {**base, "manifest": ptr.manifest, "released_at": ptr.at, "age_s": _age(ptr.at, now),
                 "precision": released.recipe if released else None, "engine": released.engine if released else None}
        return TargetStatus(**facts, state="stale", reason=_stale_reason(p, released))
    skipped = f"skipped by the latest run: {_one_line(outcome.reason)}" if outcome and outcome.status == "skipped" \
        else None
    return TargetStatus(**base, state="missing", reason=x.unknown or skipped or NOTHING_RELEASED)


def _one_line(text: str, limit: int = 300) -> str:
    """A multi-line reason (a parser's list of errors under its summary) as one line, at most ``limit`` long."""
    joined = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return joined if len(joined) <= limit else joined[:limit - 1].rstrip() + "…"


def _stale_reason(p: _Pair, released: ManifestSummary | None) -> str:
    if p.export.unknown:
        return p.export.unknown
    if released is None:
        return "the released plan's manifest is not in the store; a run rebuilds it"
    changes = build_changes(released, p.export, p.target)
    if changes == [SAME_INPUTS]:
        return "the released build is not the one published for this target; a run rebuilds it"
    return "; ".join(changes) + " (not built yet)"


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
