"""Every command block of README.md and docs/*.md runs as written, or says why not and what runs it instead.

A block marked ``<!-- run by tests/docs_blocks/MODULE -->`` runs in that module as a user runs it (tests/docs_blocks
says how: a clone of its own per module, the README's quick start first, each block twice in a row, from the wheel,
in a venv that holds exactly what the text installs; tests/docrun.py says how the install set is read). The named
module runs every block marked for it: ``run_marked_blocks`` takes the blocks from the calling module's own path.
Blocks that need a GPU, AWS or Docker registries carry ``<!-- not run here: WHY -->``; the test command (CI's) is
``run by .ci/run``.
"""

from __future__ import annotations

from .docblocks import COMMANDS, REPO, all_blocks, blocks, without_comments
from .docrun import RUNNERS, install_set, own_venv, quick_start, run_by, runner


def test_every_command_block_is_run_or_says_why_not():
    for b in all_blocks():
        assert b.lang, f"{b.where}: say what the block is (bash, python, yaml, text)"
        if b.lang not in COMMANDS:
            continue
        assert b.marker, f"{b.where}: mark it <!-- run by {RUNNERS}MODULE --> or <!-- not run here: WHY -->"
        if b.marker.startswith("run by"):
            path = runner(b)
            assert (REPO / path).is_file(), f"{b.where}: {path} is not there"
            assert b.doc.stem in (REPO / path).read_text(), f"{b.where}: {path} does not read {b.doc.name}"
            if path.startswith("tests/"):  # a test module: one that runs every block marked for it
                assert path.startswith(RUNNERS), f"{b.where}: {path} is not a module of {RUNNERS}"
                assert "run_marked_blocks(request" in (REPO / path).read_text(), f"{b.where}: {path} does not run it"
        else:
            assert b.marker.startswith("not run here: ") and len(b.marker) > 20, b.where


def test_every_module_that_runs_blocks_is_named_by_a_marker():
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / RUNNERS).glob("test_*.py")}
    assert {runner(b) for b in run_by(RUNNERS)} == modules


def test_farm_md_explains_the_readme_farm_block_command_for_command():
    readme_farm = next(b for b in blocks(REPO / "README.md") if "prefect server start" in b.text)
    farm = next(b for b in blocks(REPO / "docs/farm.md") if "prefect server start" in b.text)
    assert without_comments(farm.text) == without_comments(readme_farm.text)
    assert "the README's farm block" in farm.marker  # run as the README's, by the module that runs the README's
    assert runner(farm) == runner(readme_farm) and readme_farm in run_by(runner(farm))


def test_the_install_sets_are_what_the_text_installs():
    quick = quick_start()
    assert quick.text.startswith("python3 -m venv .venv") and own_venv(quick)
    sets = {b.where: install_set(b, quick) for b in run_by(RUNNERS)}
    assert set(sets.values()) == {frozenset({"rtx"}), frozenset({"rtx", "precision"}), frozenset({"rtx", "profiles"}),
                                  frozenset({"rtx", "profiles", "triton"}), frozenset({"rtx", "farm"})}, sets
    farm = next(b for b in run_by(RUNNERS) if "prefect server start" in b.text)
    assert sets[farm.where] == {"rtx", "farm"}  # no [reports]: charts are optional
    remakes = [b for b in run_by(RUNNERS) if own_venv(b) and "python3 -m venv .venv" in b.text]
    assert remakes == [quick]  # the one block that runs on an overlay of its venv (docrun.link_venv)
