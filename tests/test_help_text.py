"""Every command's ``--help`` at 80 columns: no line over 80, no backtick, no paragraph broken mid-sentence.

Rich wraps a help paragraph greedily: a line ends where the next word would not fit. So a line followed by more of
its paragraph, with room left for that next word, is a break written into the source (a docstring's lines are
broken to fit 120 columns), printed as it is: the paragraph reads as if cut off.
"""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from trtfarm.cli.main import registered

WIDTH = 80


def command_paths() -> list[list[str]]:
    """Every command and group, as the words that reach it (``[]``: trtfarm itself)."""
    def walk(command, path):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(registered()), []))


def description(help_text: str) -> list[str]:
    """The lines between the usage line and the first panel (the command's own paragraphs)."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    return lines[start:end]


def hard_breaks(lines: list[str], width: int = WIDTH) -> list[str]:
    """Lines that end although the next word of their paragraph fits after them (padding: one column each side)."""
    return [line.strip() for line, after in zip(lines, lines[1:], strict=False)
            if line.strip() and after.strip() and len(line.rstrip()) + 1 + len(after.split()[0]) <= width - 1]


def test_the_check_finds_a_manual_break_and_passes_a_wrapped_paragraph():
    wrapped = [" " + "word " * 15 + "wordy", " the rest"]
    assert hard_breaks(wrapped) == []
    assert hard_breaks([" store, and estimates each build from", " the build times"]) == [
        "store, and estimates each build from"]
    assert hard_breaks([" a paragraph.", "", " the next one"]) == []


def test_every_help_fits_80_columns_without_backticks_or_breaks_inside_a_sentence():
    runner = CliRunner()
    paths = command_paths()
    assert ["whatif"] in paths and ["farm", "run"] in paths and len(paths) > 30
    for path in paths:
        result = runner.invoke(registered(), [*path, "--help"], env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"})
        assert result.exit_code == 0, (path, result.output)
        lines = result.output.splitlines()
        assert max(len(line) for line in lines) <= WIDTH, (path, result.output)
        assert "`" not in result.output, (path, result.output)
        assert len(description(result.output)) >= 2, (path, result.output)
        assert hard_breaks(description(result.output)) == [], (path, result.output)
