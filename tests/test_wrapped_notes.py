"""Notes that wrap keep their indent (the README's rule, issue 59): on a terminal a wrapped line continues under
itself or beside its label, never at column 0; in a pipe each note stays one line (a log keeps it whole)."""

from __future__ import annotations

from rich.console import Console

from trtfarm.cli.tables import labelled, lines_keeping_indent, note_line, notes

LONG = "kOPT values for profile 0 violate shape constraints: node_of_stateN: dimensions not compatible for elementwise"


def shown(write, terminal: bool = True, width: int = 40) -> list[str]:
    console = Console(width=width, force_terminal=terminal, color_system=None, record=True, emoji=False)
    write(console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def indents(lines: list[str]) -> list[int]:
    return [len(line) - len(line.lstrip(" ")) for line in lines]


def test_a_builders_error_keeps_each_lines_indent_when_it_wraps():
    text = f"model.onnx: the builder failed:\n  - {LONG}\nFix: check the profiles"
    lines = shown(lambda c: lines_keeping_indent(c, text, first="[bold]target failed:[/] "))
    detail = lines[lines.index(next(x for x in lines if x.startswith("  - "))):][:-1]
    assert len(detail) > 2 and all(i >= 2 for i in indents(detail)), lines
    assert lines[0].startswith("target failed: model.onnx:") and lines[-1] == "Fix: check the profiles", lines
    assert all(len(line) <= 40 for line in lines)


def test_in_a_pipe_each_line_of_the_error_stays_one_line():
    text = f"model.onnx: the builder failed:\n  - {LONG}"
    assert shown(lambda c: lines_keeping_indent(c, text), terminal=False) == ["model.onnx: the builder failed:",
                                                                               f"  - {LONG}"]


def test_a_note_wraps_beside_its_label_on_a_terminal_and_is_one_line_in_a_pipe():
    lines = shown(lambda c: note_line(c, "note:", LONG))
    assert len(lines) > 2 and lines[0].startswith("note: kOPT") and set(indents(lines[1:])) == {len("note: ")}, lines
    assert shown(lambda c: note_line(c, "note:", LONG), terminal=False) == [f"note: {LONG}"]


def test_notes_under_a_table_and_labelled_lines_keep_their_indent():
    lines = shown(lambda c: notes(c, [("alpha/h100-trt11.4", LONG)]))
    assert len(lines) > 2 and all(i == 2 for i in indents(lines)), lines
    lines = shown(lambda c: labelled(c, "released:", LONG))
    assert set(indents(lines[1:])) == {len("released: ")}, lines
