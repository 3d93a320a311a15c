"""What a run asks of the store stays bounded: the planner reads each fact once and the build job carries it.

Real RTX builds against a real file:// store wrapped to count each request (tests/store_requests.py). The bounds are the
counts on the commit that removed the repeats (docs/measurements.md, "What a run asks of the store"); a change that
reads the same fact again fails here. Before: a local build of three targets made 27 requests, its up-to-date rerun 12,
a refit run 24, a farm run's planning 14 and its jobs 26.
"""

from __future__ import annotations

import pytest

from trtfarm.building.run_job import run_job
from trtfarm.pipeline import plan_run, run_local
from trtfarm.publishing.release import ReleaseEvent, read_pointer
from trtfarm.run_setup import find_exports
from trtfarm.scratch import scratch_dir
from trtfarm.store import open_store

from .fleets import ONE_RTX_TARGET
from .store_requests import export_at, farm_run, local_build, refit_run, request_for

pytestmark = pytest.mark.integration


def store_of(tmp_path):
    return (tmp_path / "store").as_uri()


def test_a_local_build_reads_each_targets_pointer_and_manifest_once_and_parses_the_onnx_once(tmp_path):
    figures = {name: t.figures() for name, t in local_build(tmp_path, store_of(tmp_path)).items()}
    first, again = figures["local build"], figures["local build, up to date"]
    # three targets: a manifest read and a pointer read each at planning; the publish and release read neither.
    # Then the model's state is recorded (state/encoder.json: one read, one swap) from fresh listings (seven: the
    # registry, plans, both channels' pointers, precision steps, runs and state records), reading
    # each target's pointer and manifest once: for its cell, and as a serving host checks the chain (3 + 3 more)
    assert first["manifest_reads"] == 3 + 3 and first["pointer_reads"] == 3 + 3
    # (and one listing of the plans of its bytes, which places the export in the order of exports: its first build)
    # and the fleet the run built for, recorded beside the states (fleets/: its document and the current pointer)
    assert first["by_method"]["compare_and_swap"] == 3 + 1 + 1 and first["requests"] <= 18 + 15 + 1 + FLEET_RECORD
    assert first["by_method"]["list_versions"] == 7
    # the rerun changed nothing: it records nothing
    assert again["manifest_reads"] == 3 and again["pointer_reads"] == 3 and again["requests"] <= 9
    reported = figures["local build with its full report"]  # the report takes each manifest from its outcome
    assert reported["manifest_reads"] == first["manifest_reads"] and reported["pointer_reads"] == 3 + 3
    # and the six report files, each written once; the state record reads the run's outcomes.json back (its damage
    # would be named)
    assert reported["requests"] <= first["requests"] + 6 + 1
    for run in (first, again):
        assert run["select_targets"] == 1 and run.get("precision_key", 0) == 0
    assert first["onnx_parses"] == 1 and first["onnx_checks"] == 1  # one parse for the files, the graph, the build
    assert again["onnx_parses"] == 0 and again["onnx_checks"] == 0  # up to date: the files' digests said so


RECORD_REQUESTS = 7 + 3  # recording a model's state: seven listings of its objects, its state record read and swapped
FLEET_RECORD = 3  # the run's fleet: the current pointer read; a fleet not yet recorded written, and the pointer swapped


def test_a_refit_run_reads_the_pointer_and_the_parent_manifest_at_planning_only(tmp_path):
    refit = refit_run(tmp_path, store_of(tmp_path))["refit run"].figures()
    # one per target at planning; then the state record reads each again, once: for its cell and as a host checks it
    assert refit["pointer_reads"] == 2 + 2
    # each target's own (absent) manifest and the released one it compares with, at planning; and that released one
    # again when its pointer moves: the release chain checks the pointer it replaces names what it says (a pointer
    # tampered with after planning is seen), reading the manifest alone (no attestations without trusted keys);
    # then the state record's one read of each target's released manifest
    assert refit["manifest_reads"] <= 6 + 2
    # and one listing of the plans of the new weights, which places them in the order of exports (first build)
    assert refit["requests"] <= 17 + RECORD_REQUESTS + 4 + 1 + FLEET_RECORD and refit["onnx_parses"] == 1
    assert refit["select_targets"] == 1


def test_a_farm_run_plans_once_and_its_jobs_read_no_pointer_or_manifest(tmp_path):
    figures = {name: t.figures() for name, t in farm_run(tmp_path, store_of(tmp_path)).items()}
    planning, jobs = figures["farm run: planning"], figures["farm run: jobs on workers"]
    assert planning["manifest_reads"] == 0 and planning["pointer_reads"] == 0  # the listings said: none yet
    assert planning["requests"] <= 10 + 1 and planning["select_targets"] <= 2  # `farm run`'s check, the flow's plan
    # (+ 1: the model's registrations listed once, which place the export at the first registration of its bytes)
    assert jobs["manifest_reads"] == 0 and jobs["pointer_reads"] == 0 and jobs["requests"] <= 14
    # up to date: the registry's record and two listings say every target is published and released, then the fleet's
    # state (status's function) agrees from its seven listings and the model's recorded state (one object)
    assert figures["farm run, up to date"]["requests"] <= 3 + 7 + 1
    assert figures["farm run, up to date"]["pointer_reads"] == 0 == figures["farm run, up to date"]["manifest_reads"]



def test_a_pointer_moved_since_planning_makes_the_release_swap_read_it_afresh_and_keep_both_moves(tmp_path):
    # given a run of new weights planned while the pointer named the first export's plan
    store = open_store(store_of(tmp_path))
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(ONE_RTX_TARGET)
    run_local(request_for(str(export_at(tmp_path / "v1", 0)), store.uri, fleet), report="none")
    request = request_for(str(export_at(tmp_path / "v2", 7)), store.uri, fleet)
    [job] = [j for p in plan_run(request, store, find_exports(store, request.model), farm=False) for j in p.jobs]
    key, seen = job.lead.release_key, job.lead.pointer
    assert seen is not None and seen.etag is not None and seen.pointer is not None
    # when another writer changes the pointer before the build publishes (an event added to its history)
    note = ReleaseEvent(**{**seen.pointer.current.model_dump(), "reason": "another writer"})
    store.compare_and_swap(key, seen.pointer.model_copy(update={"history": [*seen.pointer.history, note]})
                           .model_dump_json(indent=2).encode(), seen.etag)
    # then the build's swap conflicts on the planned ETag, reads the pointer afresh and moves it, keeping that event
    with scratch_dir("trtfarm-build-") as work:
        [outcome] = run_job(store, job, work).outcomes
    after, _ = read_pointer(store, key)
    assert after.manifest == job.lead.manifest_key and str(outcome.release).startswith(f"released: {key}: ")
    assert [e.reason for e in after.history][-2] == "another writer"
