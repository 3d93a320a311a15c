"""After the quick start, the blocks that build the example another way: docs/precision.md's (the precision step,
then a build with its fp16 recipe; the same for int8, calibrated on the data make_model.py writes),
docs/profiles.md's (profiles derived from a shape log, a build with them, a request routed) and docs/serving.md's
(the same, then a Triton repository)."""

from __future__ import annotations

import pytest

from ..docblocks import REPO, blocks
from ..docrun import run_marked_blocks


@pytest.mark.integration
def test_the_precision_profiles_and_serving_blocks_say_what_the_docs_say(request, venvs, tmp_path):
    ran = run_marked_blocks(request, venvs, tmp_path)
    precision = ran.of("--precision fp16")
    assert all("trial build: fp16, the model's recipe is fp32" in o for o in precision[:1])
    int8 = [" ".join(o.split()) for o in ran.of("--precision int8")]  # calibrated on make_model.py's calib.npz
    assert all("int8 gate passed" in o for o in int8) and "trial build: int8, the model's recipe is fp32" in int8[0]
    assert "2 built" in int8[0] and "2 up-to-date" in int8[1], int8
    written = (ran.work / "triton-repo/encoder/config.pbtxt").read_text()
    shown = next(b.text for b in blocks(REPO / "docs/serving.md") if b.text.startswith("# Written by `trtfarm triton"))
    assert written == shown  # docs/serving.md shows the config this command writes
