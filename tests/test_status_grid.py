"""``trtfarm status``'s folded blocks drawn by ``cli/grid.py`` are Rich's own ``Table.grid``, to the byte.

The referee is Rich: generated rows (targets, styled states, details of words of every length with ``code`` spans
and accents) at generated console widths, printed through a terminal console with colour, once as
Rich's grid and once as ``grid_lines``' lines. Where ``grid_lines`` declines (a word wider than its column), the
caller prints Rich's grid, so nothing is compared.
"""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from trtfarm.cli.common import message_text
from trtfarm.cli.grid import grid_lines
from trtfarm.cli.status_view import STATE_STYLE

WORD = st.text(st.sampled_from("abcxyz0123456789.-:/()[]é"), min_size=1, max_size=14)
DETAIL = st.lists(st.one_of(WORD, WORD.map(lambda w: f"`{w}`")), max_size=30).map(" ".join)
ROW = st.tuples(st.from_regex(r"  [a-z0-9][a-z0-9-]{0,20}", fullmatch=True), st.sampled_from(sorted(STATE_STYLE)),
                DETAIL)


def _console(width: int) -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, width=width, force_terminal=True, color_system="truecolor", emoji=False), sink


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=8), width=st.integers(20, 160), first_min=st.integers(2, 24))
def test_grid_lines_print_what_rich_prints(rows, width, first_min):
    cells = [(first, Text.assemble((state, STATE_STYLE[state])), message_text(detail)) for first, state, detail in rows]
    theirs, their_sink = _console(width)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, min_width=first_min)
    grid.add_column(no_wrap=True, min_width=8)
    grid.add_column()
    for first, second, last in cells:
        grid.add_row(escape(first), second, last)
    theirs.print(grid)
    ours, our_sink = _console(width)
    lines = grid_lines(ours, cells, (first_min, 8))
    if lines is None:  # the caller prints Rich's grid: only where a word is wider than the column, or none is there
        room = width - max(first_min, *(len(f) for f, _, _ in rows)) - max(8, *(len(s) for _, s, _ in rows)) - 4
        words = [cell_len(w) for _, _, d in rows for w in d.replace("`", "").split()]
        assert not words or max(words) > room, (rows, width)
        return
    ours.print(Text("\n").join(lines), soft_wrap=True)
    assert our_sink.getvalue() == their_sink.getvalue()


def test_a_block_of_the_status_view_is_drawn_and_wide_characters_are_left_to_rich():
    rows = [("  h100-trt11", Text.assemble(("failed", STATE_STYLE["failed"])),
             message_text("the tensorrt builder failed: out of memory; run `trtfarm build` again (since 2026-12-04)")),
            ("  rtx-4090-rtx", Text.assemble(("released", STATE_STYLE["released"])),
             message_text("3d ago, fp16, engine ok"))]
    console, _ = _console(80)
    lines = grid_lines(console, rows, (16, 8))
    assert lines is not None and [line.plain.rstrip() for line in lines] == [
        "  h100-trt11      failed    the tensorrt builder failed: out of memory; run",
        "                            trtfarm build again (since 2026-12-04)",
        "  rtx-4090-rtx    released  3d ago, fp16, engine ok"]
    assert grid_lines(console, [("  a", Text("failed"), "名前 is wide")], (4, 8)) is None
