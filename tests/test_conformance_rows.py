"""The second half of the conformance matrix's rows (tests/test_conformance.py runs the first: every other row)."""

from __future__ import annotations

import pytest

from .corpus.matrix import ROWS
from .test_conformance import check_row

pytestmark = pytest.mark.integration
HALF = ROWS[1::2]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance-rows")


@pytest.mark.parametrize("row", HALF, ids=[r.name for r in HALF])
def test_every_step_gives_what_the_matrix_expects(row, work):
    check_row(row, work)
