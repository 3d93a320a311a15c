"""Planning decides and writes nothing; one executor carries the decisions out, for ``trtfarm build`` and the farm.

Each state a store can be in that planning decides about (a published plan a killed run left unreleased, a damaged
release pointer, a damaged manifest of the very build, plan bytes that no longer hash to their manifest) is made on
a store built for real (TensorRT-RTX on this CPU). The planner runs against that store wrapped to refuse every write
(local and farm planning, and ``farm run``'s up-to-date check); then ``trtfarm build`` carries the plan out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trtfarm import layout
from trtfarm.pipeline import plan_run, run_local
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import register_export
from trtfarm.run_setup import find_exports
from trtfarm.store import open_store

from .fleet_store import encoder_export
from .fleets import ONE_RTX_TARGET

WRITES = ("put_if_absent", "compare_and_swap", "upload_file", "delete", "sweep_temporaries")


class WritesRefused:
    """A store that answers every read and refuses every write (the test fails on the first one)."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        if name in WRITES:
            def refused(*args, **kwargs):
                raise AssertionError(f"planning wrote to the store: {name}{args[:1]}")
            return refused
        return getattr(self._store, name)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A registered encoder, built and released for one target; returns (work folder, store URI, fleet file)."""
    work = tmp_path_factory.mktemp("decides")
    fleet = work / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    uri = str(work / "store")
    register_export(open_store(uri), encoder_export(work / "enc", 0))
    [row] = run_local(MatrixRequest(store=uri, targets_file=str(fleet)), report="none")
    assert row.outcome.status == "built" and row.outcome.release.action == "moved", row
    return work, uri, fleet


def _published(uri: str) -> tuple[str, str]:
    """(the manifest key, the release pointer key) of the encoder's one published plan."""
    store = open_store(uri)
    [manifest] = [k for k in store.list(layout.plans_prefix("encoder")) if k.endswith(layout.MANIFEST_NAME)]
    [pointer] = list(store.list(layout.releases_prefix("encoder")))
    return manifest, pointer


def _damage(store, case: str, manifest: str, pointer: str) -> None:
    if case == "unreleased":  # published, then the run was killed before the release
        store.delete(pointer)
    elif case == "damaged pointer":
        store.compare_and_swap(pointer, b"{not json", store.get(pointer).etag)
    elif case == "damaged manifest":
        path = store.root / manifest
        path.write_bytes(b"{" + path.read_bytes()[1:-9])
    elif case == "plan bytes changed":  # same size, other bytes: only --verify-store's re-hash sees it
        path = store.root / layout.plan_key(layout.folder_of(manifest))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


# case -> (what planning decides: releases, withdrawals, jobs; the outcome's release action after the run)
CASES = {"unreleased": ((1, 0, 0), "moved"), "damaged pointer": ((1, 0, 0), "already"),
         "damaged manifest": ((0, 1, 1), "already"), "plan bytes changed": ((0, 1, 1), "already")}


@pytest.mark.parametrize("case", list(CASES))
def test_planning_decides_without_writing_and_the_build_carries_it_out(built, case):
    work, uri, fleet = built
    manifest, pointer = _published(uri)
    store = open_store(uri)
    _damage(store, case, manifest, pointer)
    request = MatrixRequest(store=uri, targets_file=str(fleet), verify_store=case == "plan bytes changed")
    readonly = WritesRefused(store)
    [plan] = plan_run(request, readonly, find_exports(readonly, "encoder"), farm=False)
    decided = (len(plan.releases), len(plan.withdrawals), len(plan.jobs))
    assert decided == CASES[case][0], (decided, plan)
    # the farm's, from the store's read model: a cell that is not this build released is triaged as locally
    [farm_plan] = plan_run(request, readonly, find_exports(readonly, None), farm=True)
    assert (len(farm_plan.releases), len(farm_plan.withdrawals), len(farm_plan.jobs)) == decided, farm_plan
    [row] = run_local(request, report="none")  # the one executor carries the plan out
    assert row.outcome.status == ("built" if decided[2] else "up-to-date"), row
    assert row.outcome.release.action == CASES[case][1], row.outcome.release
    if case == "damaged pointer":
        assert row.outcome.release.repaired.startswith(f"repaired the damaged pointer {pointer}")
    again = run_local(MatrixRequest(store=uri, targets_file=str(fleet), verify_store=True), report="none")
    assert [(r.outcome.status, r.outcome.release.action) for r in again] == [("up-to-date", "already")]


def test_farm_runs_up_to_date_check_moves_no_pointer(built):
    """``trtfarm farm run`` asks "is everything published?" before any Prefect call: it must not release."""
    work, uri, fleet = built
    _, pointer = _published(uri)
    store = open_store(uri)
    saved = store.get(pointer).data
    store.delete(pointer)
    try:
        code = ("import json, sys; from trtfarm.cli.farm import _published_already; "
                "from trtfarm.planning.requests import MatrixRequest; "
                f"r = MatrixRequest(store={uri!r}, targets_file={str(fleet)!r}); "
                "print(json.dumps(_published_already(r, *r.check_targets())))")  # None, or RunRows
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TRTFARM_SIGNING_KEY": ""})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) is None  # not up to date: a release is left to do, and the run does it
        assert store.get(pointer) is None  # and the check did not do it
        readonly = WritesRefused(store)
        plans = plan_run(MatrixRequest(store=uri, targets_file=str(fleet)), readonly,
                         find_exports(readonly, None), farm=True)
        assert [len(p.releases) for p in plans] == [1]
    finally:
        store.put_if_absent(pointer, saved)


def test_build_prints_the_moved_pointer_when_it_repaired_it_first(tmp_path):
    """The release outcome is a value: a repaired pointer's note and the move both reach the person."""
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    uri = str(tmp_path / "store")
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": ""}
    build = [sys.executable, "-m", "trtfarm", "build", "--store", uri, "--targets-file", str(fleet)]
    first = encoder_export(tmp_path / "enc0", 0) / "model.onnx"
    subprocess.run([*build, str(first)], check=True, capture_output=True, timeout=300, env=env)
    old, pointer = _published(uri)
    store = open_store(uri)
    damaged = json.loads(store.get(pointer).data)
    del damaged["plan_sha256"]  # a field missing: the history still says where it pointed
    store.compare_and_swap(pointer, json.dumps(damaged).encode(), store.get(pointer).etag)
    second = encoder_export(tmp_path / "enc1", 1) / "model.onnx"  # new weights: a new build to release
    proc = subprocess.run([*build, str(second)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert f"repaired: repaired the damaged pointer {pointer}" in text and "rewritten from its history" in text, \
        proc.stdout
    moved = json.loads(store.get(pointer).data)["manifest"]
    assert moved != old
    model, gpu, toolchain = layout.parse_release_key(pointer)
    here = f"{model}/{gpu}/"
    was, now = layout.short_ref(old).removeprefix(here), layout.short_ref(moved).removeprefix(here)
    assert f"released: {model}/{gpu} {toolchain}: {was} -> {now}" in text, proc.stdout


def test_farm_runs_up_to_date_check_agrees_with_status_on_a_tampered_pointer(built):
    """Published and released by the listings, yet the pointer names another plan sha256: status calls it refused,
    and the up-to-date check (the same state function) leaves it to the run, never "every target is published"."""
    work, uri, fleet = built
    _, pointer = _published(uri)
    store = open_store(uri)
    saved = store.get(pointer)
    doc = json.loads(saved.data)
    code = ("import json, sys; from trtfarm.cli.farm import _published_already; "
            "from trtfarm.planning.requests import MatrixRequest; "
            f"r = MatrixRequest(store={uri!r}, targets_file={str(fleet)!r}); "
            "print(json.dumps(None if (rows := _published_already(r, *r.check_targets())) is None else len(rows)))")
    env = {**os.environ, "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": ""}

    def check():
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert check() == 1  # sound: up to date, no run
    store.compare_and_swap(pointer, json.dumps({**doc, "plan_sha256": "0" * 64}).encode(), saved.etag)
    try:
        assert check() is None
    finally:
        store.compare_and_swap(pointer, saved.data, store.get(pointer).etag)
