"""README.md's quick start and "your own project" (from the wheel, a small conv net of the test's own as your
model.onnx), and the blocks that read the quick start's store: docs/fleet-views.md's and docs/signing.md's."""

from __future__ import annotations

import pytest

from ..docrun import run_marked_blocks


@pytest.mark.integration
def test_the_quick_start_and_the_blocks_after_it_say_what_they_did(request, venvs, tmp_path):
    ran = run_marked_blocks(request, venvs, tmp_path)
    quick, project = ran.of("make_model.py"), ran.of("~/myproject")
    assert "2 built" in quick[0] and "2 up-to-date" in quick[1]
    assert "built-in fleet" in project[0] and "2 built" in project[0] and "wrote" in project[0]
    assert "2 up-to-date" in project[1] and project[1].count("kept ") == 4 and "nothing written" in project[1]
    assert "rtx-4090-rtx1.7" in project[1].rsplit("targets (", 1)[1]  # the written fleet names it as the built-in did
    assert "name: myproject" in (ran.home / "myproject/farm.yaml").read_text()
    signed = ran.of("TRTFARM_TRUSTED_KEYS")
    assert all("signature: signed by trusted key" in o for o in signed)
    for fleet in ran.of("trtfarm whatif --fleet"):  # read-only: the same both times
        assert "toolchain: tensorrt 11.4.0.106 -> tensorrt 11.5.0.20" in " ".join(fleet.split())
        assert "fleet status:" in fleet and "released" in fleet  # the quick start's RTX plans
    assert (ran.work / "status.html").read_text().count('data-model="encoder"') == 1
