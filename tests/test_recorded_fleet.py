"""The same story on every host: a view on a host without a fleet file reads the fleet the store's runs recorded.

A store is built with a fleet file of one RTX 4090 target. A process on a host whose (faked) GPU is an H200, with
no gpu_targets.yaml and no ``$TRTFARM_TARGETS``, asks ``status`` and ``pull --gpu rtx-4090``: the view shows the
store's target as released (not the H200's own built-in target as missing), and the pull finds the plan. A fleet
file given on the command line still wins, and the record carries no signing block.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from trtfarm.layout_shared import fleet_pointer_key
from trtfarm.state.fleet_record import recorded_fleet
from trtfarm.store import open_store

from . import forkcli
from .fleet_store import encoder_export
from .fleets import ONE_RTX_TARGET

REPO = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200:9.0:141.0"


def run(env, cwd, *args, code: int = 0) -> subprocess.CompletedProcess:
    proc = forkcli.trtfarm(args, env=env, cwd=cwd, timeout=300)
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded-fleet")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET + "signing: {trusted_keys: [/nowhere/key.pub]}\n")
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": "",
           "TRTFARM_STORE": str(root / "store"), "TRTFARM_TARGETS": str(fleet)}
    export = encoder_export(root / "encoder", 0, name="encoder")
    run(env, root, "build", str(export / "model.onnx"))
    elsewhere = root / "h200-host"
    elsewhere.mkdir()
    host = {k: v for k, v in env.items() if k != "TRTFARM_TARGETS"}
    host.update(PYTHONPATH=f"{REPO / 'tests/fake_nvml'}{os.pathsep}{REPO}", FAKE_NVML_GPUS=H200,
                TRTFARM_ACCEPTED_RELEASES=str(root / "accepted.json"))
    return root, host, elsewhere


def test_the_run_records_its_fleet_without_the_signing_block(built):
    root, _, _ = built
    store = open_store(str(root / "store"))
    found = recorded_fleet(store)
    assert found is not None and [t.id for t in found.fleet.targets] == ["rtx-4090-rtx1.7"]
    assert found.fleet.signing.trusted_keys == []  # trust never comes from the store
    assert json.loads(store.get(fleet_pointer_key()).data)["fleet"] == found.digest


def test_status_on_a_host_without_a_fleet_file_shows_the_stores_targets(built):
    _, host, elsewhere = built
    shown = run(host, elsewhere, "status", "--json")
    cells = json.loads(shown.stdout)
    assert [(c["target"], c["state"]) for c in cells] == [("rtx-4090-rtx1.7", "released")], cells
    assert "using the fleet the store recorded" in shown.stderr
    own = elsewhere / "gpu_targets.yaml"  # a fleet file here wins over the record
    own.write_text(ONE_RTX_TARGET.replace("rtx-4090-rtx1.7", "rtx-4090-other"))
    try:
        cells = json.loads(run(host, elsewhere, "status", "--json").stdout)
        assert [c["target"] for c in cells] == ["rtx-4090-other"]
    finally:
        own.unlink()


def test_pull_of_a_store_gpu_works_on_a_host_without_a_fleet_file(built):
    _, host, elsewhere = built
    pulled = run(host, elsewhere, "pull", "encoder", "--gpu", "rtx-4090", "--to", str(elsewhere / "encoder.plan"))
    assert (elsewhere / "encoder.plan").stat().st_size > 0, pulled.stdout
