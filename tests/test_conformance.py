"""The conformance matrix (tests/corpus/matrix.py): every corpus model through every step, as a user runs them.

Each cell must give the outcome its row expects, with the words its message must hold, and no traceback. The plain
TensorRT-RTX builder is the referee of the build: trtfarm builds what it builds and refuses what it refuses.
"""

from __future__ import annotations

import pytest

from .corpus.matrix import ROWS, run_row

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_every_step_gives_what_the_matrix_expects(row, work):
    cells = run_row(row, work)
    wrong = {step: (row.expect[step], f"{c.outcome}: {c.detail[:400]}", c.traceback)
             for step, c in cells.items() if not c.matches(row.expect[step])}
    assert not wrong, wrong
    plain, build = cells["plain"], cells["build"]
    assert (plain.outcome == "built") == (build.outcome == "built"), (plain, build)
