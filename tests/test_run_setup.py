"""One run setup for both paths (trtfarm/run_setup.py): read once per run, and one key per run or said otherwise.

``trtfarm build`` opens the store and reads the fleet file once (counted by wrapping the real functions); a build
whose fleet file names another key than the default fleet's signs builds and releases with the run's key, and its
provenance says so; a worker whose key is not the run's signs with its own, and both the provenance and the outcome
say which key signed what. Real TensorRT-RTX builds into a file store.
"""

from __future__ import annotations

import json
import os
import subprocess

from trtfarm import layout
from trtfarm.building.run_job import run_job
from trtfarm.pipeline import plan_run, run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.attest import read_stored
from trtfarm.publishing.release import read_pointer
from trtfarm.run_setup import find_exports, setup_run
from trtfarm.signing.keys import PemKeySigner, key_hint, load_trusted_keys
from trtfarm.signing.release_claim import verify_release
from trtfarm.store import open_store

from .call_counts import count_calls
from .conftest import REPO
from .test_signing import RELEASED_FLEET, TOOLCHAIN, TRTFARM, key_pair

TARGET = "rtx-4090-rtx1.7"


def _signing(stored) -> dict:
    return json.loads(stored.provenance)["predicate"]["buildDefinition"]["internalParameters"]["signing"]


def _hint(public) -> str:
    return key_hint(public.read_bytes())


def test_a_local_build_opens_the_store_and_reads_the_fleet_once_per_run(tmp_path, example_dir, monkeypatch):
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    request = MatrixRequest(model=str(example_dir / "model.onnx"), store=(tmp_path / "store").as_uri(),
                            targets_file=str(fleet), targets=[TARGET], dispatch="local")
    for expected in ("built", "up-to-date"):  # a build, then a rerun that finds it published
        counts = count_calls(monkeypatch, open_store, load_fleet)
        [row] = run_local(request, report="outcomes")
        assert row.outcome.status == expected, row.outcome.reason
        assert counts == {"open_store": 1, "load_fleet": 1}
        monkeypatch.undo()


def test_a_fleet_file_naming_another_key_than_the_default_fleet_signs_the_whole_run_with_it(tmp_path, example_dir):
    (k1, p1), (k2, p2) = key_pair(tmp_path, "k1"), key_pair(tmp_path, "k2")
    default, run_fleet = tmp_path / "default.yaml", tmp_path / "run.yaml"
    default.write_text(RELEASED_FLEET + f"signing:\n  key: {k1}\n")
    run_fleet.write_text(RELEASED_FLEET + f"signing:\n  key: {k2}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRTFARM_SIGNING_KEY", "TRTFARM_TRUSTED_KEYS")}
    uri = (tmp_path / "store").as_uri()
    built = subprocess.run([*TRTFARM, "build", str(example_dir / "model.onnx"), "--target", TARGET, "--store", uri,
                            "--targets-file", str(run_fleet), "--json"], env={**env, "TRTFARM_TARGETS": str(default)},
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    store = open_store(uri)
    [row] = json.loads(built.stdout)
    stored = read_stored(store, row["manifest"].removeprefix(store.uri + "/"))
    assert _signing(stored) == {"signed_by_worker": _hint(p2), "release_key": _hint(p2)}
    assert stored.verdict(load_trusted_keys([p2], "k2")).ok is True
    assert stored.verdict(load_trusted_keys([p1], "k1")).ok is not True  # the default fleet's key signed nothing
    pointer, _ = read_pointer(store, layout.release_key("encoder", "rtx-4090", TOOLCHAIN))
    _, claim = verify_release(pointer.claim, load_trusted_keys([p2], "k2"))  # the release: the same run key
    assert claim.manifest == stored.manifest_key


def test_a_worker_whose_key_is_not_the_runs_says_which_key_signed_the_build(tmp_path, example_dir):
    (k1, p1), (k2, p2) = key_pair(tmp_path, "worker"), key_pair(tmp_path, "run")
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET + f"signing:\n  key: {k2}\n")
    request = MatrixRequest(model=str(example_dir / "model.onnx"), store=(tmp_path / "store").as_uri(),
                            targets_file=str(fleet), targets=[TARGET], dispatch="local")
    setup = setup_run(request)
    assert setup.key_id == _hint(p2)
    [plan] = setup.stamped(plan_run(request, setup.store, find_exports(setup.store, request.model), farm=False,
                                    fleet=setup.fleet, targets=setup.targets))
    [job] = plan.jobs
    assert job.release_key == _hint(p2)  # the job carries the run's key id to the worker
    (tmp_path / "work").mkdir()
    result = run_job(setup.store, job, tmp_path / "work", signer=PemKeySigner(k1))  # as a farm child signs
    [outcome] = result.outcomes
    assert outcome.status == "built", outcome.reason
    assert f"signed by this worker's key {_hint(p1)[:12]}, not the run's key {_hint(p2)[:12]}" in outcome.reason
    stored = read_stored(setup.store, outcome.manifest_key)
    assert _signing(stored) == {"signed_by_worker": _hint(p1), "release_key": _hint(p2)}
    assert stored.verdict(load_trusted_keys([p1], "worker")).ok is True
