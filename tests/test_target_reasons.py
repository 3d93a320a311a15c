"""An outcome's reasons are typed parts (the cause, then each later step's note), joined only where text leaves.

``--json`` and a run's stored outcomes keep their one ``reason`` text; a farm child's result carries the parts to its
parent as they are; no step appends to the text or splits it again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trtfarm.vocabulary.job import JobResult
from trtfarm.vocabulary.target_outcome import TargetOutcome

REPO = Path(__file__).resolve().parents[1]


def built() -> TargetOutcome:
    o = TargetOutcome("h100-trt11.4", "built", "built in 41 s", build_digest="ab" * 32)
    o.note("signed-by", "signed by this worker's key 0123456789ab, not the run's key fedcba987654")
    o.note("full-build", "full build: the refit runtime is missing")
    o.note("timing-cache", "")  # nothing said: no part
    o.note("built-on", "built on h100 by child run 1")
    return o


def test_the_parts_keep_their_kinds_and_join_in_the_order_said():
    o = built()
    assert [r.kind for r in o.reasons] == ["full-build", "cause", "signed-by", "built-on"]
    assert o.reason == ("full build: the refit runtime is missing; built in 41 s; signed by this worker's key "
                        "0123456789ab, not the run's key fedcba987654; built on h100 by child run 1")
    assert o.headline == "full build: the refit runtime is missing"
    assert TargetOutcome("t", "skipped").reason == "" and TargetOutcome("t", "skipped").headline == ""
    with pytest.raises(AttributeError):
        o.reason = "appended by hand"  # the text is made from the parts, never written


def test_the_json_and_the_stored_form_keep_one_reason_text():
    o = built()
    row = o.to_json()
    assert list(row) == ["target", "status", "reason", "fix", "manifest", "build_s", "plan_bytes", "verification",
                         "release", "released", "held_by"]
    assert row["reason"] == o.reason
    back = TargetOutcome.from_record(o.to_record(), "file:///s")
    assert back.reason == o.reason and back.build_digest == o.build_digest


def test_a_childs_result_brings_each_part_to_its_parent():
    sent = JobResult(job_id="j", model="enc", outcomes=[built()])
    got = JobResult.model_validate_json(sent.model_dump_json())
    assert got.outcomes[0].reasons == built().reasons and got.outcomes[0].reason == built().reason


def test_no_module_writes_or_cuts_an_outcomes_reason_text():
    """``o.reason = ...`` and ``o.reason.split(...)`` were the hand joins and cuts; ``note`` and ``headline`` replace
    them (a view may still show the joined text's first line)."""
    found = []
    for pkg in ("trtfarm", "flows", "tasks"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, ast.AugAssign) else []
                if any(isinstance(t, ast.Attribute) and t.attr == "reason" and getattr(t.value, "id", "") == "o"
                       for t in targets):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
                        and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "reason":
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
