"""Rows laid out as Rich's ``Table.grid(padding=(0, 2))`` lays them out, drawn without Rich's table machinery.

Rich measures and renders each cell of a table through its whole renderable protocol: ``trtfarm status`` of 1,000
models x 20 targets, a grid of 20 rows per model, spent more CPU printing its 21,000 rows than computing them. Here
the first two columns are plain unwrapped text and the last is wrapped by Rich's own ``Text.wrap``, each line one
``Text``. Where the layout is not that simple (the last column narrower than a word of it, a text of several lines
or with characters two cells wide, or the first columns wider than the console), ``grid_lines`` returns None and
the caller prints Rich's grid.
``tests/test_status_grid.py`` holds the lines equal to Rich's grid on generated rows and widths.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

GAP = 2  # the grid's padding between columns (``padding=(0, 2)``, collapsed, no edge)


def grid_lines(console: Console, rows: list[tuple[str, Text, str]], min_widths: tuple[int, int]) -> list[Text] | None:
    """Each row ``(first, second, last)`` as the grid's lines; None where the grid is not that simple.

    ``first`` is plain text, ``second`` a styled one-line text, ``last`` Rich markup wrapped in what the console's
    width leaves it.
    """
    if not rows:
        return []
    lasts = [console.render_str(last, highlight=False) for _, _, last in rows]  # as a grid's cell (its emoji too)
    w1 = max(min_widths[0], *(cell_len(first) for first, _, _ in rows))
    w2 = max(min_widths[1], *(second.cell_len for _, second, _ in rows))
    room = console.width - w1 - w2 - 2 * GAP
    words = [cell_len(word) for text in lasts for word in text.plain.split()]
    if any("\n" in t.plain or t.cell_len != len(t.plain) for t in lasts) or any("\n" in s.plain for _, s, _ in rows) \
            or room < max(words, default=1) or room < 1:  # Rich wraps characters two cells wide its own way
        return None
    w3 = min(room, max(t.cell_len for t in lasts))
    if w3 == 0:  # Rich gives an empty column a width of its own
        return None
    gap, blank = " " * GAP, Text(" " * (w1 + GAP + w2 + GAP))
    out = []
    for (first, second, _), last in zip(rows, lasts, strict=True):
        head = Text(first + " " * (w1 - cell_len(first)) + gap)
        head.append_text(second)
        head.append(" " * (w2 - second.cell_len) + gap)
        for i, line in enumerate(last.wrap(console, w3)):
            line.truncate(w3, pad=True)  # to the column's cells, as Rich pads a cell
            row = (head if i == 0 else blank).copy()
            row.append_text(line)
            out.append(row)
    return out
