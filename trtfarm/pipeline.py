"""The core pipeline of a run, with no orchestrator: plan once, carry the plan out, report.

``trtfarm build`` calls ``run_local`` in its own process (no Prefect, no server). The ``build-matrix`` flow uses the
same pieces (``plan_run``, the executor's ``execute``, ``store_reports``) and sends the jobs to workers.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from trtfarm import layout
from trtfarm.executor import changed_models, execute, precision_first
from trtfarm.machine.capabilities import local_capabilities
from trtfarm.planning.plan import ExportWork, plan_export
from trtfarm.planning.requests import MatrixRequest
from trtfarm.project.fleet_file import load_fleet
from trtfarm.run_setup import RunSetup, setup_run
from trtfarm.scratch import scratch_dir
from trtfarm.store import Store
from trtfarm.store.base import Progress, side_by_side
from trtfarm.vocabulary.exports import ExportRef
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.job import BuildJob, JobResult
from trtfarm.vocabulary.precision_job import PrecisionJob, PrecisionRun
from trtfarm.vocabulary.target_outcome import RunRow, TargetOutcome

if TYPE_CHECKING:  # the builder and the toolchain are imported by the first build (a rerun that is up to date has none)
    from trtfarm.toolchain import BuildProgress

WORK_PREFIX = "trtfarm-build-"
PLAN_THREADS = 16  # models planned at once in a farm run: their store requests overlap
STALE_S = 6 * 3600  # a work folder untouched this long belongs to a killed build


def plan_run(request: MatrixRequest, store: Store, exports: Iterable[ExportRef], farm: bool,
             fleet: Fleet | None = None, targets: list[ResolvedTarget] | None = None) -> list[ExportWork]:
    """Plan every model of the run; the fleet is parsed, its targets resolved and this machine scanned once per run.

    A farm run over several models reads the store's one read model once (``RunView``: listings, the models' state
    records) and plans the models on a few threads (their store requests overlap; the store client is shared).
    Planning reads the store only: what it decides is carried out by ``trtfarm.executor``.
    """
    fleet = fleet or load_fleet(request.targets_file)
    if targets is None:  # an unknown target id fails the run before any work
        targets = select_targets(fleet, request.targets or None)
    exports = list(exports)
    if not farm:
        caps = local_capabilities()
        return [plan_export(request, e, store, farm=False, fleet=fleet, caps=caps, targets=targets) for e in exports]
    from trtfarm.state.run_view import RunView

    view = RunView(store, fleet, targets, whole_store=True) if len(exports) > 1 else None
    with ThreadPoolExecutor(max_workers=min(PLAN_THREADS, max(len(exports), 1))) as pool:
        return list(pool.map(lambda e: plan_export(request, e, store, farm=True, fleet=fleet, view=view,
                                                   targets=targets), exports))


def replanner(setup: RunSetup, farm: bool) -> Callable[[ExportWork], ExportWork]:
    """Plan a model again once its precision step ran (``executor.precision_first``): it reads the step's record.

    The plan is stamped with the run's key id, as the run's first plans are.
    """
    def again(plan: ExportWork) -> ExportWork:
        return setup.stamped([plan_export(setup.request, plan.precision.export, setup.store, farm=farm,
                                          fleet=setup.fleet, caps=None if farm else local_capabilities(),
                                          targets=setup.targets)])[0]

    return again


def _here_precision(store: Store):
    """The precision steps run one after another in this process (ModelOpt is imported by the first)."""
    async def run(batch: list[PrecisionJob]) -> list[PrecisionRun]:
        from trtfarm.building.precision_runner import run_precision

        return [run_precision(store, job) for job in batch]

    return run


def has_news(statuses: Iterable[str]) -> bool:
    """True when a model's run built or failed something (it gets a full report); else it is all up to date."""
    return any(s in ("built", "failed") for s in statuses)


def new_run_id() -> str:
    """A run id for a run without an orchestrator: sortable by time, unique across concurrent processes."""
    return f"local-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def store_reports(store: Store, run: str, rows: list[RunRow], out: Path, full: bool = True) -> dict[str, Path | None]:
    """Each model's report of this run in the store: in full where it has news, else only its outcomes.

    Returns the rendered ``report.md`` per model (None where only the outcomes were stored). A full report is
    rendered into ``out/<model>/`` and copied into the store under ``reports/<model>/<run>/``. ``full=False`` stores
    only the outcomes (``trtfarm report RUN`` renders the rest when someone asks).
    """
    from trtfarm.reports.report import outcomes_json, write_report

    by_model: dict[str, list[TargetOutcome]] = {}
    for r in rows:
        by_model.setdefault(r.model, []).append(r.outcome)
    written: dict[str, Path | None] = {}
    quiet = {}
    for model, outcomes in by_model.items():
        if full and has_news(o.status for o in outcomes):
            (out / model).mkdir(parents=True, exist_ok=True)
            written[model] = write_report(store, model, run, outcomes, out / model).path
        else:
            quiet[layout.report_key(model, run, "outcomes.json")] = outcomes_json(outcomes)
            written[model] = None
    with side_by_side(store, PLAN_THREADS) as pool:  # a nightly has one per model: overlap them (on a network)
        list(pool.map(lambda item: store.put_if_absent(*item), quiet.items()))
    return written


def sweep_stale_work(root: Path | None = None, now: float | None = None) -> int:
    """Remove build folders that killed builds left in TMPDIR (older than ``STALE_S``); returns how many."""
    root, now, removed = Path(root or tempfile.gettempdir()), now or time.time(), 0
    for folder in root.glob(f"{WORK_PREFIX}*"):
        try:
            if folder.is_dir() and now - folder.stat().st_mtime > STALE_S:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        except FileNotFoundError:  # another process swept it first
            continue
    return removed


def run_local(request: MatrixRequest, *, progress: Callable[[str], BuildProgress] | None = None,
              upload: Callable[[str], Progress] | None = None, report: str = "full") -> list[RunRow]:
    """Plan and build in this process (``trtfarm build``); returns one row per target.

    Targets already published are up to date (and released, if a killed run left them unreleased); each
    compatibility class is built once. When the run built or failed something, its report goes to the store:
    ``report="full"`` renders it (markdown, HTML, charts), ``"outcomes"`` stores only the outcomes, ``"none"`` nothing.
    """
    setup = setup_run(request)  # the store opened, the fleet read, the key loaded: once for the run
    plans = setup.stamped(plan_run(request, setup.store, setup.exports, farm=False, fleet=setup.fleet,
                                   targets=setup.targets))
    plans = _to_the_end(precision_first(plans, _here_precision(setup.store), replanner(setup, False)))
    jobs = [job for plan in plans for job in plan.jobs]
    sweep_stale_work()
    setup.sweep_temporaries(plans)  # what a killed build of these plans left in the store
    run, store, signer = new_run_id(), setup.store, setup.signer

    async def here(batch: list[BuildJob]) -> list[JobResult]:
        return _run_jobs(store, batch, run, progress, upload, signer)

    rows = _to_the_end(execute(store, plans, here, lambda job: "this machine", signer))
    setup.note_unsigned(rows)
    if report != "none" and jobs:
        with scratch_dir("trtfarm-report-") as out:
            store_reports(store, run, rows, out, full=report == "full")
    record_changed_states(setup, changed_models(plans, rows), "trtfarm build")
    return rows


def record_changed_states(setup: RunSetup, changed: list[str], by: str) -> list[str]:
    """Record in the store the state of each model the run changed (``executor.changed_models``).

    The run's key signs the records; the trusted keys of its fleet file verify each release recorded. Best effort:
    the builds stand when the store refuses the record, and views compute what is not recorded.
    """
    if not changed:  # (an up-to-date rerun imports none of the recorder)
        return []
    from trtfarm.errors import TrtfarmError
    from trtfarm.publishing.release import who
    from trtfarm.state.recorder import record_states

    every = None if setup.request.targets else setup.targets  # the fleet's every target, resolved already
    try:
        setup.record_fleet()
        trust = setup.trusted_keys() if setup.signer else None
        return record_states(setup.store, setup.fleet, changed, by=f"{by} ({who()})", targets=every,
                             signer=setup.signer, trust=trust)
    except TrtfarmError:
        return []


def _run_jobs(store: Store, jobs: list[BuildJob], run: str, progress, upload, signer) -> list[JobResult]:
    if not jobs:  # up to date: the builder is not even imported
        return []
    from trtfarm.building.run_job import run_job

    results = []
    for job in jobs:
        with scratch_dir(WORK_PREFIX) as work:
            results.append(run_job(store, job, work, progress=progress(job.lead.target.id) if progress else None,
                                   upload_progress=upload, run_id=run, signer=signer))
    return results


def _to_the_end(coroutine):
    """The value of a coroutine that never waits, run without an event loop (and without importing asyncio).

    The executor is a coroutine so that the farm's flow can await its children; here every job runs in this process,
    so nothing in it suspends and one ``send`` runs it to its end.
    """
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError("the local executor waited on an event loop")
