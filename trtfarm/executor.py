"""Carry out a run's plans: the one place that acts on what planning decided.

Planning (``planning/plan.py``) reads the store and returns decisions: build jobs, releases of published targets,
withdrawals of damaged ones, a precision step to run before a model's builds. ``precision_first`` runs those steps
(through the caller's dispatch) and has the models planned again, their builds now known; ``execute`` carries the
rest out, for ``trtfarm build`` in its own process and for the
build-matrix flow around its children alike: it withdraws the damaged publishes, completes the releases (or keeps a
trial's pointer), runs the jobs through the caller's ``dispatch`` (this process, or one farm child per job), builds
in full the refits the workers could not do, and returns one row per target. ``promote`` carries out what the
promotion gates (``releases/gates.py``) decided: ``trtfarm promote`` and the promote-candidates flow call it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trtfarm.planning.plan import ExportWork, full_build_of
from trtfarm.store import Store
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.target_outcome import RunRow, TargetOutcome

if TYPE_CHECKING:  # the promotion path reads the gates and the channels; a build never does
    from trtfarm.releases.gates import Candidate
    from trtfarm.vocabulary.pointer import ReleasePointer
    from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun

Dispatch = Callable[[list[BuildJob]], Awaitable[list[JobResult]]]
PrecisionDispatch = Callable[[list["PrecisionJob"]], Awaitable[list["PrecisionRun"]]]


async def precision_first(plans: list[ExportWork], dispatch: PrecisionDispatch,
                          replan: Callable[[ExportWork], ExportWork]) -> list[ExportWork]:
    """The plans with each decided precision step run, before any build.

    A refused gate fails the model's every target (its words kept); a passed one has the model planned again
    (``replan``, which reads the step's record) for its builds.

    ``dispatch`` runs the steps and returns their ``PrecisionRun``s in order (this process, or farm children).
    """
    pending = [p for p in plans if p.precision is not None]
    if not pending:
        return plans
    runs = await dispatch([p.precision for p in pending])
    after = {id(p): _after_step(p, run, replan) for p, run in zip(pending, runs, strict=True)}
    return [after.get(id(p), p) for p in plans]


def _after_step(plan: ExportWork, run: PrecisionRun, replan: Callable[[ExportWork], ExportWork]) -> ExportWork:
    """The plan once its precision step ran: failed on every target, or planned again with the step's result."""
    if run.failed:
        return _failed_plan(plan, run.failed)
    again = replan(plan)
    if again.precision is not None:  # the step ran, yet its record is not in the store
        return _failed_plan(plan, f"the precision step ran but the store holds no record of it "
                                  f"({again.precision.key[:12]}); rerun the build")
    if run.build_path is None:
        return again
    jobs = [j.model_copy(update={"model": j.model.model_copy(update={"build_path": run.build_path})})
            for j in again.jobs]  # a build on the machine that converted reads its file (checked by sha256)
    return again.model_copy(update={"jobs": jobs})


def _failed_plan(plan: ExportWork, why: str) -> ExportWork:
    return plan.model_copy(update={"precision": None,
                                   "outcomes": {t: TargetOutcome(t, "failed", why) for t in plan.targets}})


def settle(store: Store, plan: ExportWork, signer=None) -> JobResult:
    """Carry out a model's decisions about published targets: withdrawals first, then releases.

    Returns the released targets' outcomes, each with its typed ``ReleaseOutcome``. ``signer`` (this process's
    key) signs the releases and the repair of a damaged pointer.
    """
    from trtfarm.building.release_move import release_if_allowed  # (imported where a plan settles something)
    from trtfarm.publishing.publish import withdraw

    for w in plan.withdrawals:
        withdraw(store, w.prefix)
    override = plan.model is not None and plan.model.release_override  # --release: past a gate not passed
    outcomes = [replace(plan.outcomes[r.target], release=release_if_allowed(
        store, r.manifest_key, r.manifest, r.release_on, None, r.trial, r.pointer, signer, r.promotion, override))
        for r in plan.releases]
    return JobResult(job_id="settle", model=plan.name, outcomes=outcomes)


async def execute(store: Store, plans: list[ExportWork], dispatch: Dispatch, where: Callable[[BuildJob], str],
                  signer=None, settler: Callable[..., JobResult] = settle) -> list[RunRow]:
    """Carry out ``plans``: settle each model's published targets, run its jobs, fall back from failed refits.

    ``dispatch`` runs a list of jobs and returns their results in order; ``where(job)`` names where a job ran (for
    the reason a refit fell back to a full build). ``settler`` is ``settle`` (the flow passes it wrapped in a task
    that retries a store failure).
    """
    settled = [settler(store, plan, signer) for plan in plans if plan.releases or plan.withdrawals]
    jobs = [job for plan in plans for job in plan.jobs]
    results = await dispatch(jobs) if jobs else []
    fallback = refit_fallbacks(jobs, results, where)
    if fallback:
        results += await dispatch(fallback)
    return rows_for(plans, [*settled, *results])


def refit_fallbacks(jobs: list[BuildJob], results: list[JobResult], where: Callable[[BuildJob], str]) -> list[BuildJob]:
    """Full builds for the refit jobs whose workers could not load the engine (``where(job)`` names them)."""
    return [full_build_of(job, f"refit not possible on {where(job)} ({result.refit_unavailable[:200]})")
            for job, result in zip(jobs, results, strict=True) if result.refit_unavailable]


def rows_for(plans: list[ExportWork], results: Iterable[JobResult]) -> list[RunRow]:
    """One row per model and target, in the fleet's order (``RunRow.to_json`` is the ``--json`` contract).

    A result's outcome (a build's, or a settled release's) wins over the one planning knew.
    """
    by_target = {(r.model, o.target): o for r in results for o in r.outcomes}
    rows = []
    for plan in plans:
        for target in plan.targets:
            outcome = by_target.get((plan.name, target)) or plan.outcomes.get(target) or \
                TargetOutcome(target, "failed", "no build ran for this target")
            rows.append(RunRow(plan.name, outcome))
    return rows


def changed_models(plans: list[ExportWork], rows: Iterable[RunRow]) -> list[str]:
    """The models whose objects a run changed: it ran jobs for them, withdrew a plan, or moved or repaired a pointer.

    Their recorded state is out of date; a rerun that changed nothing leaves it (and the store) as it was.
    """
    moved = {r.model for r in rows if r.outcome.release is not None
             and (r.outcome.release.action == "moved" or r.outcome.release.repaired)}
    return [p.name for p in plans if p.jobs or p.withdrawals or p.name in moved]


@dataclass(frozen=True)
class PromotionResult:
    """A candidate with its gates as they stood, and what the promotion did: moved stable, or lost a race."""

    candidate: Candidate
    moved: ReleasePointer | None = None
    refused: str = ""

    @property
    def action(self) -> str:
        """``promoted``, ``refused`` (another promotion moved stable first), else the candidate's verdict."""
        return "promoted" if self.moved else "refused" if self.refused else self.candidate.verdict

    def to_json(self) -> dict:
        """One ``promote --json`` row: the candidate's, with ``promoted`` and ``refused``."""
        return {**self.candidate.to_json(), "promoted": self.moved is not None, "refused": self.refused or None}


def promote(store: Store, found: list[Candidate], *, reason: str = "promoted: every gate holds", by: str | None = None,
            force: bool = False, signer=None, trust=None) -> list[PromotionResult]:
    """Move stable to each candidate whose gates hold (every one not already served, with ``force``).

    The loser of a promotion race (``ChannelRefused``: another writer moved stable first) is reported, not raised.
    """
    from trtfarm.publishing.release import ChannelRefused
    from trtfarm.releases.channels import promote_move

    done = []
    for c in found:
        moved, why = None, ""
        if c.verdict == "holds" or (force and c.verdict != "already"):
            try:
                moved = promote_move(store, c.pointer, c.figures(), c.verdict, reason=reason, by=by, force=force,
                                     signer=signer, trust=trust)
            except ChannelRefused as lost:
                why = str(lost)
        done.append(PromotionResult(c, moved, why))
    return done


def promote_exit(rows: list[PromotionResult]) -> int:
    """``promote``'s exit: 1 when a gate fails (or another promotion moved first), 3 when gates wait, else 0."""
    unmoved = [r for r in rows if r.moved is None]
    if any(r.refused or r.candidate.verdict == "fails" for r in unmoved):
        return 1
    return 3 if any(r.candidate.verdict == "waits" for r in unmoved) else 0
