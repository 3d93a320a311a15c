"""A skip's fix travels as a field (``ServeGap.fix``, ``TargetOutcome.fix``), never recovered by splitting text."""

from __future__ import annotations

import ast
from pathlib import Path

from trtfarm.machine.capabilities import Capabilities
from trtfarm.project.buildable import serve_gap
from trtfarm.project.fleet_file import load_fleet
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.target_outcome import TargetOutcome

from ..conftest import RTX_FLEET

REPO = Path(__file__).resolve().parents[2]


def _clause_after_first(path: Path) -> list[int]:
    """Lines that take what follows a ``"; "`` in a text: ``text.split("; ", ...)[1]`` (or a later part)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ("split", "rsplit") \
                and node.value.args and isinstance(node.value.args[0], ast.Constant) \
                and node.value.args[0].value == "; " and not (isinstance(node.slice, ast.Constant)
                                                             and node.slice.value == 0):
            found.append(node.lineno)
    return found


def test_no_view_recovers_a_fix_by_splitting_a_reason():
    offenders = [f"{p.relative_to(REPO)}:{line}" for pkg in ("trtfarm", "flows", "tasks")
                 for p in sorted((REPO / pkg).rglob("*.py")) for line in _clause_after_first(p)]
    assert offenders == [], f"read the outcome's fix (TargetOutcome.fix, ServeGap.fix) instead: {offenders}"


def test_a_missing_toolchain_is_a_reason_that_ends_with_its_fix_and_the_fix_alone(tmp_path):
    (tmp_path / "fleet.yaml").write_text(RTX_FLEET)
    h100 = next(t for t in select_targets(load_fleet(tmp_path / "fleet.yaml")) if t.id == "h100-trt11.4")
    gap = serve_gap(h100, Capabilities(versions={}))
    assert gap.why == "`tensorrt` 11.4.0.106 is not installed here" and "tensorrt==11.4.0.106" in gap.fix
    assert gap.reason == f"{gap.why}; {gap.fix}"
    row = TargetOutcome(h100.id, "skipped", gap.reason, fix=gap.fix).to_json()
    assert (row["reason"], row["fix"]) == (gap.reason, gap.fix)
    assert TargetOutcome.from_record(row, "file:///s").fix == gap.fix
