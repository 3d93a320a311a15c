"""Tables that fit the terminal: no cell wraps or breaks a word; columns that do not fit are left to ``--wide``.

Each column has a rank: the narrowest terminal keeps the highest. ``fitted_table`` drops the lowest-ranked columns
until the table's natural width fits the console, and says which it left out (the caller prints what matters of
them underneath, one wrapped line per row).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

KEEP = 99  # a column that is never dropped


@dataclass(frozen=True)
class Column:
    """One column: its header, its rank (higher stays longer) and how it is aligned."""

    header: str
    rank: int = KEEP
    justify: str = "left"


def _table(title: str | None, caption: str | None, columns: list[Column], rows: list[dict]) -> Table:
    table = Table(title=title, caption=caption)
    for c in columns:
        table.add_column(c.header, justify=c.justify, no_wrap=True)
    for row in rows:
        table.add_row(*(row.get(c.header, "") for c in columns))
    return table


def fitted_table(console: Console, columns: list[Column], rows: list[dict], *, title: str | None = None,
                 caption: str | None = None, wide: bool = False) -> tuple[Table, list[str]]:
    """The table with every column that fits ``console`` (all with ``wide``), and the headers it left out."""
    chosen = list(columns)
    while True:
        table = _table(title, caption, chosen, rows)
        natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
        fits = natural <= console.width
        droppable = [c for c in chosen if c.rank < KEEP]
        if wide or fits or not droppable:
            return table, [c.header for c in columns if c not in chosen]
        lowest = min(c.rank for c in droppable)
        chosen.remove([c for c in droppable if c.rank == lowest][-1])
