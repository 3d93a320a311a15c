"""The farm refuses before it starts: a misspelt model or target in `farm run` is exit 2 with the nearest name, and
no flow run exists in the Prefect server (a real one, on Postgres) afterwards.

The deployment is there and ``encoder`` is registered, so a run could start: the same command with the right name
creates one (no worker serves it; it is only counted).
"""

from __future__ import annotations

import pytest

from ..farm_server import TRTFARM, Farm, farm_client, started_runs
from ..fleet_store import encoder_export
from ..fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
TARGET = "rtx-4090-rtx1.7"


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A Prefect server with the pools and the build-matrix deployment; ``encoder`` registered in a file store."""
    home = tmp_path_factory.mktemp("farm-typos")
    (home / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (home / "store").mkdir()
    f = Farm(home, {"TRTFARM_STORE": (home / "store").as_uri(), "TRTFARM_TARGETS": str(home / "gpu_targets.yaml"),
                    "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": ""})
    try:
        f.start_server()
        f.trtfarm("pools", "sync")
        f.deploy("build-matrix")
        f.trtfarm("models", "push", str(encoder_export(home / "encoder", 0)))
        yield f
    finally:
        f.stop()


def _runs(farm) -> set[str]:
    """The ids of the flow runs the server holds that were not made by the nightly schedule."""
    with farm_client(farm) as client:
        return started_runs(client)


@pytest.mark.parametrize("args, meant", [(["encodr"], "'encoder'"), (["encoder", "--target", "rtx-4090-rtx17"],
                                                                     f"'{TARGET}'")])
def test_a_typo_in_farm_run_is_refused_with_the_nearest_name_and_creates_no_flow_run(farm, args, meant):
    before = _runs(farm)
    done = farm.run([*TRTFARM, "farm", "run", *args, "--wait"], check=False, timeout=120)  # a run no worker serves
    # would be waited on for ever: refused, the command ends at once
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and f"did you mean {meant}?" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and _runs(farm) == before


def test_the_right_name_creates_a_flow_run(farm):
    """The typos above were refused by name, not for want of a deployment: the right name starts a run."""
    before = _runs(farm)
    started = farm.trtfarm_json("farm", "run", "encoder", "--target", TARGET)
    assert _runs(farm) - before == {started["flow_run_id"]}, started
