"""Tables that fit the terminal: no cell wraps or breaks a word; columns that do not fit are left to ``--wide``.

Each column has a rank: the narrowest terminal keeps the highest. ``fitted_table`` drops the lowest-ranked columns
until the table's natural width fits the console, and says which it left out (the caller prints what matters of
them underneath, one wrapped line per row).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, Group
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

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


def _records(title: str | None, caption: str | None, columns: list[Column], rows: list[dict]) -> Group:
    """``--wide`` on a terminal too narrow for the table: each row as a block of ``header  value`` lines.

    A value wraps beside its header, by words, never cut (the plan id ``show`` takes stays whole).
    """
    parts: list = [Text.from_markup(title, style="bold")] if title else []
    for row in rows:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column()
        for c in columns:
            if row.get(c.header, ""):
                grid.add_row(c.header, row[c.header])
        parts += [Text(""), grid]
    if caption:
        parts += [Text(""), Text.from_markup(caption, style="dim")]
    return Group(*parts)


def fitted_table(console: Console, columns: list[Column], rows: list[dict], *, title: str | None = None,
                 caption: str | None = None, wide: bool = False) -> tuple[Table | Group, list[str]]:
    """The table with every column that fits ``console``, and the headers it left out.

    ``wide``: every column; as a table where it fits, else as one record per row (``_records``).
    """
    chosen = list(columns)
    while True:
        table = _table(title, caption, chosen, rows)
        natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
        fits = natural <= console.width
        droppable = [c for c in chosen if c.rank < KEEP]
        if wide and not fits:  # every value whole: one record per row, one line per field
            return _records(title, caption, columns, rows), []
        if wide or fits or not droppable:
            return table, [c.header for c in columns if c not in chosen]
        lowest = min(c.rank for c in droppable)
        chosen.remove([c for c in droppable if c.rank == lowest][-1])


def notes(console: Console, items: list[tuple[str, str]], indent: int = 2) -> None:
    """``label: text`` lines under a table, each wrapped by words with its indent kept on every line it takes.

    The text is a message (``message_text``: escaped, backticks bold); the label is user text, printed as text.
    """
    from rich.markup import escape

    from trtfarm.cli.common import message_text

    for label, text in items:
        console.print(Padding(f"{escape(label)}: {message_text(text)}", (0, 0, 0, indent)), highlight=False)


def labelled(console: Console, label: str, text: str) -> None:
    """``label text`` with the text wrapped by words beside the label (a hanging indent), never under it."""
    from rich.table import Table as Grid

    grid = Grid.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(label, text)
    console.print(grid, highlight=False)


def note_line(console: Console, label: str, text: str) -> None:
    """``label text``: one line in a pipe (a log keeps it whole); on a terminal wrapped beside the label.

    The text is a message already (markup: ``message_text``); on a terminal it wraps by words beside the label
    (``labelled``), never back to column 0.
    """
    if console.is_terminal:
        labelled(console, label, text)
    else:
        console.print(f"{label} {text}", highlight=False, soft_wrap=True)


def lines_keeping_indent(console: Console, text: str, first: str = "") -> None:
    """A message of several lines (a builder's error and its indented details), each wrapped at its own indent.

    ``text`` is a message (escaped here: ``message_text``); ``first`` is markup put before its first line (``[bold
    red]target failed:[/] ``). On a terminal a line that wraps continues under itself, never at column 0; in a pipe
    each line stays one line.
    """
    from trtfarm.cli.common import message_text

    for i, line in enumerate(text.splitlines() or [""]):
        indent = len(line) - len(line.lstrip(" "))
        shown = (first if i == 0 else "") + message_text(line[indent:])
        if console.is_terminal:
            console.print(Padding(shown, (0, 0, 0, indent)), highlight=False)
        else:
            console.print(" " * indent + shown, highlight=False, soft_wrap=True)
