"""After the quick start, the blocks that build the example another way: docs/precision.md's (the precision step,
then a build with its fp16 recipe), docs/profiles.md's (profiles derived from a shape log, a build with them, a request
routed) and docs/serving.md's (the same, then a Triton repository)."""

from __future__ import annotations

import pytest

from ..docblocks import REPO, blocks
from ..docrun import run_marked_blocks


@pytest.mark.integration
def test_the_precision_profiles_and_serving_blocks_say_what_the_docs_say(request, venvs, tmp_path):
    ran = run_marked_blocks(request, venvs, tmp_path)
    precision = ran.of("--precision fp16")
    assert all("trial build: fp16, the model's recipe is fp32" in o for o in precision[:1])
    written = (ran.work / "triton-repo/encoder/config.pbtxt").read_text()
    shown = next(b.text for b in blocks(REPO / "docs/serving.md") if b.text.startswith("# Written by `trtfarm triton"))
    assert written == shown  # docs/serving.md shows the config this command writes
