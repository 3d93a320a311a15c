"""The conformance matrix (tests/corpus/matrix.py): every corpus model through every step, as a user runs them.

Each cell must give the outcome its row expects, with the words its message must hold, and no traceback. The plain
TensorRT-RTX builder is the referee of the build: trtfarm builds what it builds and refuses what it refuses.
The rows are split over two modules (every other row: this one from the first, tests/test_conformance_rows.py from
the second) so that the suite's workers run them side by side; tests/test_conformance_families.py runs the
generated families.
"""

from __future__ import annotations

import pytest

from .corpus.matrix import ROWS, run_row

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance")


HALF = ROWS[::2]  # tests/test_conformance_rows.py: ROWS[1::2]


@pytest.mark.parametrize("row", HALF, ids=[r.name for r in HALF])
def test_every_step_gives_what_the_matrix_expects(row, work):
    check_row(row, work)


def check_row(row, work) -> None:
    """Every cell of the row as it expects; the build agrees with the plain builder."""
    cells = run_row(row, work)
    wrong = {step: (row.expect[step], f"{c.outcome}: {c.detail[:400]}", c.traceback)
             for step, c in cells.items() if not c.matches(row.expect[step])}
    assert not wrong, wrong
    plain, build = cells["plain"], cells["build"]
    assert (plain.outcome == "built") == (build.outcome == "built"), (plain, build)
