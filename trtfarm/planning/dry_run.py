"""What a farm run would do, in one word per (model, target), as its own planner decides it (``farm run --dry-run``).

The dry run asks the planner the run uses (planning/plan.py: its first stage, ``listed_stage``, over the store's one
read model, ``state/run_view.py``; else ``plan_export``) and reads the plan back as the executor would carry it
out: build, withdraw and rebuild, release, up to date, skipped. ``state/views.py`` (``dry_run``) adds what the
what-if knows of each build (what changed, an estimate); the decisions stay the planner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from trtfarm.errors import IntegrityError, MismatchError, UserInputError, first_line
from trtfarm.planning.plan import ExportWork, listed_stage, plan_export
from trtfarm.planning.requests import MatrixRequest
from trtfarm.state.run_view import RunView
from trtfarm.store import Store
from trtfarm.store.base import side_by_side
from trtfarm.vocabulary.decisions import Release
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget
from trtfarm.vocabulary.fleetview import RunDecision
from trtfarm.vocabulary.targets import TargetWork

PLAN_THREADS = 16  # models planned at once, as a farm run plans them (``pipeline.plan_run``)


class Planned(NamedTuple):
    """The planner's decisions, the models it refused (and why), and the store's read model it planned from.

    The what-if that explains the decisions (``state.views.dry_run``) reads the same survey: one reading of the
    store for the whole dry run, not a second one that could see a store changed in between.
    """

    decided: list[RunDecision]
    refused: dict[str, str]
    view: RunView


def planned_decisions(request: MatrixRequest, store: Store, exports: list[ExportRef], fleet: Fleet,
                      targets: list[ResolvedTarget] | None) -> Planned:
    """What a farm run of ``exports`` decides per (model, target): this planner's answer, read only (the dry run's).

    Planned as the run plans them (one read model of the store for a run over several models, a few at once). A
    model the planner refuses (a bad build spec, a target its farm.yaml names that the fleet lacks, a damaged export
    record) is returned apart, with why: the run refuses it too; the other models' decisions stand.
    """
    view = RunView(store, fleet, targets, whole_store=len(exports) > 1, cached=True)  # cached: as a view

    def one(export: ExportRef) -> tuple[list[RunDecision] | None, str]:
        try:
            return _decided(request, export, store, fleet, view, targets), ""
        except (UserInputError, MismatchError, IntegrityError) as refused:  # its spec, its damaged export record
            return None, first_line(refused)

    with side_by_side(store, min(PLAN_THREADS, len(exports))) as pool:  # each in turn on a local disk
        planned = list(pool.map(one, exports))
    view.save()
    refused = {e.name or e.uri: why for e, (said, why) in zip(exports, planned, strict=True) if said is None}
    return Planned([d for said, _ in planned for d in said or []], refused, view)


def _decided(request: MatrixRequest, export: ExportRef, store: Store, fleet: Fleet, view: RunView,
             targets: list[ResolvedTarget] | None) -> list[RunDecision]:
    """One model's decisions: the planner's first stage where it answers, else the whole planner.

    Where the first stage leaves targets to build, the run fetches the model and plans those targets again from
    its files, to the same build digests (the export record's): the dry run stops before the download.
    """
    first = None if request.force or request.refit or request.verify_store else \
        listed_stage(request, export, store, fleet, view, targets)
    if first is None:
        return run_decisions(plan_export(request, export, store, farm=True, fleet=fleet, view=view,
                                         targets=targets))
    return run_decisions(first.plan, first.todo)


def run_decisions(work: ExportWork, todo: Sequence[TargetWork] = ()) -> list[RunDecision]:
    """The plan of one model, as one word per target: what the executor will do with it.

    ``todo``: targets still to build beside the plan's jobs (the first stage's, before any job is made).
    """
    withdrawn = {w.target: w.why for w in work.withdrawals}
    releases = {r.target: r for r in work.releases}
    built = {p.target.id: (p, job.full_build_reason) for job in work.jobs for p in job.plans}
    built.update((p.target.id, (p, "")) for p in todo)
    out = []
    for tid in work.targets:
        if work.precision is not None:
            out.append(RunDecision(work.name, tid, "precision first", "its precision step runs first; the builds "
                                   "are planned once it ran"))
        elif tid in built:
            p, reason = built[tid]
            why = withdrawn.get(tid)
            out.append(RunDecision(work.name, tid, "withdraw+rebuild" if why else "build",
                                   f"withdrawn first: {why}" if why else reason, p.build_digest))
        elif tid in work.outcomes:
            o = work.outcomes[tid]
            word = o.status if o.status in ("skipped", "failed") else \
                "release" if tid in releases and _moves(releases[tid]) else "up-to-date"
            out.append(RunDecision(work.name, tid, word, o.reason, o.build_digest))
    return out


def _moves(r: Release) -> bool:
    """Whether carrying out a release would write its pointer (policy permitting).

    Not a trial's, and the pointer as planning read it does not name the manifest already (or is damaged: the
    release repairs it).
    """
    seen = r.pointer.pointer if r.pointer else None
    return r.trial is None and (seen is None or seen.manifest != r.manifest_key)
