"""A build gc deleted is rebuilt *because it was deleted*, and the dry run says so (issue 59).

The model's declared fp16 build is held as a trial (its gate cannot judge it); a later fp32 trial of the same target
is newer, so ``gc --keep 1 --apply`` deletes the fp16 plan. The dry run of the next farm run needs that very build
again: it names the deletion (when, and gc's reason), not "precision recipe: fp32 -> fp16" against the other
trial that happens to be the closest published build.
"""

from __future__ import annotations

import json

import pytest

from .test_unjudged_not_released import export, trtfarm, workdir  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration


def test_the_dry_run_says_a_build_gc_deleted_was_deleted(workdir):  # noqa: F811
    model = export(workdir, "dead", bias=-1000.0)
    pushed = trtfarm(workdir, "models", "push", "dead", "--store", "store")  # the farm builds registered exports
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    for args in ([], ["--precision", "fp32"]):
        built = trtfarm(workdir, "build", model, "--store", "store", *args)
        assert built.returncode == 0, built.stdout + built.stderr
    swept = trtfarm(workdir, "gc", "--keep", "1", "--apply", "--store", "store")
    assert swept.returncode == 0 and "dead/rtx-4090" in swept.stdout, swept.stdout + swept.stderr
    planned = trtfarm(workdir, "farm", "run", "dead", "--dry-run", "--json", "--store", "store")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    doc = json.loads(planned.stdout)
    decisions = doc["decisions"] if isinstance(doc, dict) else doc
    [decision] = [d for d in decisions if d["model"] == "dead"]
    [reason] = decision["reasons"]
    assert reason.startswith("its plan (build ") and "was deleted by gc on " in reason, decision
    assert "#2 newest, not released (keeping 1)" in reason and "precision recipe" not in reason, decision
