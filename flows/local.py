"""Local mode: run the matrix in-process on Prefect's ephemeral API, with progress on the terminal."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from trtfarm.errors import UserInputError
from trtfarm.planning.plan import plan_export
from trtfarm.profiles.profile import load_profiles_file, profile_from_args
from trtfarm.triggers.registry import ExportRef


class _RichBuild:
    """IProgressMonitor callbacks -> one progress bar per target (top-level phase steps)."""

    def __init__(self, bars: Progress, target: str) -> None:
        self.bars, self.target, self.task = bars, target, None

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        if parent is None:
            self.task = self.bars.add_task(f"build {self.target}", total=max(steps, 1))
        elif self.task is not None:
            self.bars.update(self.task, description=f"build {self.target}: {name.lower()}")

    def step_complete(self, name: str, step: int) -> bool:
        if self.task is not None and name == "Building engine":
            self.bars.update(self.task, completed=step + 1)
        return True

    def phase_finish(self, name: str) -> None:
        if self.task is not None and name == "Building engine":
            self.bars.update(self.task, description=f"build {self.target}: done", completed=self.bars.tasks[
                self.task].total)


def _profile_texts(profile_args: list[str], profiles_file: Path | None) -> list[dict]:
    """Profiles given on the command line, as text; empty: the model's farm.yaml (or shapes.jsonl) decides."""
    if profile_args and profiles_file:
        raise UserInputError("give either --profile flags or --profiles FILE, not both")
    profiles = load_profiles_file(profiles_file).profiles if profiles_file else \
        [profile_from_args(profile_args)] if profile_args else []
    return [{n: r.text() for n, r in p.root.items()} for p in profiles]


def _triage_without_prefect(model: Path, name: str | None, profile_args: list[str], profiles_file: Path | None,
                            targets: list[str], targets_file: str, store: str,
                            precision: str | None) -> tuple[str, list[dict], list[dict] | None]:
    """Check every input before Prefect starts; when nothing needs a build, answer without starting it at all.

    The precision step runs here (and is stored), so a refused conversion fails every target before any build.
    """
    planned = plan_export(store, ExportRef(str(model), ""), targets_file=targets_file, targets=targets,
                          profiles=_profile_texts(profile_args, profiles_file), name=name, precision=precision,
                          force=False, farm=False)
    if planned.model is None:  # the precision gate refused the recipe
        return planned.name, [], [o.to_json() for o in planned.outcomes.values()]
    rows = None if planned.todo else [planned.outcomes[p.target.id].to_json() for p in planned.plans]
    return planned.name, planned.profile_texts, rows


def run_local_build(model: Path, *, name: str | None, profile_args: list[str], profiles_file: Path | None,
                    targets: list[str], store: str, targets_file: str, verbose: bool, console: Console,
                    precision: str | None = None) -> list[dict]:
    """Build ``model`` in this process; return the per-target outcome rows."""
    resolved_name, profiles, finished = _triage_without_prefect(model, name, profile_args, profiles_file, targets,
                                                                targets_file, store, precision)
    if finished is not None:
        return finished
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    from flows.build_matrix import build_matrix
    from trtfarm.building import progress
    from trtfarm.planning.requests import MatrixRequest

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bars:
        def upload(target: str):
            task = bars.add_task(f"upload {target}", total=None)
            return lambda n: bars.advance(task, n)

        progress.install(lambda t: _RichBuild(bars, t), upload)
        request = MatrixRequest(model=str(model), name=resolved_name, targets=targets, profiles=profiles,
                                store=store, targets_file=targets_file, precision=precision, dispatch="local")
        return asyncio.run(build_matrix(request))
