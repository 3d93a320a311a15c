"""Progress on the terminal: one bar per build (builder steps) and per upload (bytes); the store's retries."""

from __future__ import annotations

import logging

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class RichBuild:
    """IProgressMonitor callbacks -> one bar per build, counting the builder's top-level steps."""

    def __init__(self, bars: Progress, target: str) -> None:
        self.bars, self.target, self.task = bars, target, None

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        """A new top-level phase opens the bar; nested phases name what the builder is doing."""
        if parent is None:
            self.task = self.bars.add_task(f"build {self.target}", total=max(steps, 1), amount=f"0/{steps} steps")
        elif self.task is not None:
            self.bars.update(self.task, description=f"build {self.target}: {name.lower()}")

    def step_complete(self, name: str, step: int) -> bool:
        """Advance on the engine-building phase's steps; never cancel."""
        if self.task is not None and name == "Building engine":
            total = int(self.bars.tasks[self.task].total or 1)
            self.bars.update(self.task, completed=step + 1, amount=f"{step + 1}/{total} steps")
        return True

    def phase_finish(self, name: str) -> None:
        """Close the bar when the engine is built."""
        if self.task is not None and name == "Building engine":
            total = self.bars.tasks[self.task].total
            self.bars.update(self.task, description=f"build {self.target}: done", completed=total,
                             amount=f"{int(total or 1)}/{int(total or 1)} steps")


def progress_bars(console: Console) -> Progress:
    """The display: shown on a terminal, silent otherwise (logs and pipes get the table only)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[amount]}"),
                    TimeElapsedColumn(), console=console, transient=False, disable=not console.is_terminal)


def upload_bar(bars: Progress):
    """A factory: ``upload(target)`` -> a callback that counts uploaded bytes on its own bar."""
    def upload(target: str):
        task = bars.add_task(f"upload {target}", total=None, amount="0 B")
        sent = [0]

        def advance(n: int) -> None:
            sent[0] += n
            bars.update(task, advance=n, amount=f"{sent[0] / 2**20:.1f} MiB")
        return advance
    return upload


class _ConsoleLines(logging.Handler):
    """Each record as one line of text on a console (above a live bar or spinner, never through it)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102 (logging's)
        from trtfarm.cli.common import message_text

        self.console.print(message_text(record.getMessage()), highlight=False, soft_wrap=not self.console.is_terminal)


def store_retries(console: Console, verbose: bool = False) -> None:
    """Show the store's retries on ``console``: each one with ``verbose`` (``-v``), else only a timeout's first wait.

    Without it the same lines (WARNING only) reach stderr through Python's last-resort handler.
    """
    logger = logging.getLogger("trtfarm.store")
    for handler in [h for h in logger.handlers if isinstance(h, _ConsoleLines)]:
        logger.removeHandler(handler)
    handler = _ConsoleLines(console)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
