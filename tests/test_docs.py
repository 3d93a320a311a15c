"""The README's commands are the ones that run: CI runs the README's test command, the CLI has every command."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from trtfarm.cli.main import app

from .conftest import REPO

README = (REPO / "README.md").read_text()


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, re.S)


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = next(b.strip() for b in bash_blocks() if "pytest" in b)
    assert test_cmd in (REPO / ".ci/run").read_text().splitlines()


def test_readme_build_command_builds_the_bundled_example():
    build_cmd = next(b.strip() for b in bash_blocks() if "trtfarm build" in b)
    assert "examples/encoder/make_model.py" in build_cmd and build_cmd.endswith("examples/encoder/model.onnx")


def test_every_command_in_the_readme_table_exists_with_its_flags():
    runner = CliRunner()
    for usage in re.findall(r"^\| `trtfarm ([^`]*)`", README, re.M):
        command = re.match(r"[a-z0-9 ]+(?= |$)", usage).group(0).split()
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        for flag in re.findall(r"--[a-z-]+", usage):
            assert flag in result.output, (command, flag)


def test_the_readme_starts_with_the_start_and_stays_short():
    """A newcomer reads top-down: the quick start, the test command and the farm on the first screen (60 lines),
    concepts after, measurements in docs/; the README at most about 400 lines."""
    lines = README.splitlines()
    first = "\n".join(lines[:60])
    assert len(lines) <= 410, len(lines)
    assert "## Quick start" in first and "## Run the tests" in first and "## A farm on one machine" in first
    assert next(b for b in bash_blocks() if "pytest" in b) in first  # the test command, whole
    assert "docs/measurements.md" in README and "## Concepts" in README
