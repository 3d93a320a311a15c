"""What a farm run would do, in one word per (model, target), as its own planner decides it (``farm run --dry-run``).

The dry run asks ``plan_export`` (planning/plan.py), the planner the run uses, over the store's one read model
(``state/run_view.py``), and reads the plan back as the executor would carry it out: build, withdraw and rebuild,
release, up to date, skipped. ``state/views.py`` (``dry_run``) adds what the what-if knows of each build (what
changed, an estimate); the decisions stay the planner's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from trtfarm.errors import UserInputError, first_line
from trtfarm.planning.plan import ExportWork, plan_export
from trtfarm.planning.requests import MatrixRequest
from trtfarm.state.run_view import RunView
from trtfarm.store import Store
from trtfarm.vocabulary.decisions import Release
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget
from trtfarm.vocabulary.fleetview import RunDecision

PLAN_THREADS = 16  # models planned at once, as a farm run plans them (``pipeline.plan_run``)


def planned_decisions(request: MatrixRequest, store: Store, exports: list[ExportRef], fleet: Fleet,
                      targets: list[ResolvedTarget] | None) -> tuple[list[RunDecision], dict[str, str]]:
    """What a farm run of ``exports`` decides per (model, target): this planner's answer, read only (the dry run's).

    Planned as the run plans them (one read model of the store for a run over several models, a few at once). A
    model the planner refuses (a bad build spec, a target its farm.yaml names that the fleet lacks) is returned
    apart, with why: the run refuses it too.
    """
    view = RunView(store, fleet, whole_store=True) if len(exports) > 1 else None

    def one(export: ExportRef) -> tuple[ExportWork | None, str]:
        try:
            return plan_export(request, export, store, farm=True, fleet=fleet, view=view, targets=targets), ""
        except UserInputError as refused:
            return None, first_line(refused)

    with ThreadPoolExecutor(max_workers=min(PLAN_THREADS, max(len(exports), 1))) as pool:
        planned = list(pool.map(one, exports))
    refused = {e.name or e.uri: why for e, (work, why) in zip(exports, planned, strict=True) if work is None}
    return [d for work, _ in planned if work is not None for d in run_decisions(work)], refused


def run_decisions(work: ExportWork) -> list[RunDecision]:
    """The plan of one model, as one word per target: what the executor will do with it."""
    withdrawn = {w.target: w.why for w in work.withdrawals}
    releases = {r.target: r for r in work.releases}
    built = {p.target.id: (job, p) for job in work.jobs for p in job.plans}
    out = []
    for tid in work.targets:
        if work.precision is not None:
            out.append(RunDecision(work.name, tid, "precision first", "its precision step runs first; the builds "
                                   "are planned once it ran"))
        elif tid in built:
            job, p = built[tid]
            why = withdrawn.get(tid)
            out.append(RunDecision(work.name, tid, "withdraw+rebuild" if why else "build",
                                   f"withdrawn first: {why}" if why else job.full_build_reason, p.build_digest))
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
