"""Progress of the precision step on the terminal: the conversion, then the comparison, as rich progress bars.

Drawn on stderr and only when stderr is a terminal (never in logs, pipes, CI or ``--json`` output captured by a
program). The conversion is one ModelOpt call, so its bar is a spinner with elapsed time; the comparison advances
once per model run on a batch of inputs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


class Progress:
    """A handle the precision step reports through; all methods are no-ops when nothing is drawn."""

    def __init__(self, bars=None) -> None:
        self._bars = bars

    @contextlib.contextmanager
    def stage(self, description: str, total: int | None = None) -> Iterator[Callable[[], None]]:
        """A bar for one stage; yields the function that advances it by one."""
        if self._bars is None:
            yield lambda: None
            return
        task = self._bars.add_task(description, total=total)
        try:
            yield lambda: self._bars.advance(task)
        finally:
            self._bars.update(task, total=total or 1, completed=total or 1)


@contextlib.contextmanager
def precision_progress(enabled: bool | None = None) -> Iterator[Progress]:
    """Progress bars on stderr; ``enabled=None``: only when stderr is a terminal."""
    from rich.console import Console

    console = Console(file=sys.stderr)  # bound now: ModelOpt's output is redirected while it converts
    if not (console.is_terminal if enabled is None else enabled):
        yield Progress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bars

    bars = Bars(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
    with bars:
        yield Progress(bars)
