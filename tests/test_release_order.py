"""Release order through the command line (issue 56): an export's place is when its bytes were first registered
or built, never its file's time; a rebuild whose plan is not the released one says so, with the command that
moves it.

Given two targets that share one build, when the same bytes are regenerated (a newer file time) and rebuilt after a
``--profiles`` build, then the rebuilt plan is released on both; when a newer export holds the release, then the
text output names what holds it and the command that moves it, and that command does.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone

import pytest

from trtfarm.publishing.publish import read_manifest
from trtfarm.publishing.release_check import read_pointer
from trtfarm.store import open_store

from . import forkcli
from .fleet_store import encoder_export

TOOLCHAIN = "tensorrt_rtx-1.7.1.116"
POINTERS = {t: f"releases/encoder/{gpu}/{TOOLCHAIN}.json" for t, gpu in
            (("rtx4090-rtx1.7", "rtx-4090"), ("rtx5090-rtx1.7", "rtx-5090"))}
# two targets of one compatibility class: one build (rtx-portable), one plan per target folder
FLEET = """\
version: 1
toolchains:
  rtx-1.7: {flavour: tensorrt_rtx, version: "1.7.1.116"}
gpus:
  rtx-4090: {nvml_name: "NVIDIA GeForce RTX 4090", compute_capability: "8.9", memory_gib: 24, pool: rtx-4090}
  rtx-5090: {nvml_name: "NVIDIA GeForce RTX 5090", compute_capability: "12.0", memory_gib: 32, pool: rtx-5090}
targets:
  - {id: rtx4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}
  - {id: rtx5090-rtx1.7, gpu: rtx-5090, toolchain: rtx-1.7, release_on: built}
"""
PROFILES = "profiles:\n  - input_ids: 1x8:8x64:16x256\n    attention_mask: 1x8:8x64:16x256\n"
PAST, FUTURE = 1_000_000_000, 1_900_000_000  # 2001 and 2030: file times that must not order anything


@pytest.fixture
def farm(tmp_path):
    """An empty store, the two-target fleet, and a profiles file."""
    (tmp_path / "gpu_targets.yaml").write_text(FLEET)
    (tmp_path / "profiles.yaml").write_text(PROFILES)
    env = {**os.environ, "COLUMNS": "200", "TRTFARM_SIGNING_KEY": "", "TRTFARM_TRUSTED_KEYS": "",
           "TRTFARM_STORE": str(tmp_path / "store"), "TRTFARM_TARGETS": str(tmp_path / "gpu_targets.yaml"),
           "TRTFARM_ACCEPTED_RELEASES": str(tmp_path / "accepted.json")}
    return tmp_path, env


def run(env, *args) -> subprocess.CompletedProcess:
    proc = forkcli.trtfarm(args, env=env, cwd=env["TRTFARM_STORE"].rsplit("/", 1)[0], timeout=300)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def regenerated(folder, seed: int, mtime: float):
    """The export written again: the same bytes for ``seed``, with the file time ``mtime``."""
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    encoder_export(folder, seed)
    os.utime(folder / "model.onnx", (mtime, mtime))
    return str(folder / "model.onnx")


def served(env) -> dict[str, str | None]:
    """The manifest each target's stable pointer names (None: nothing released)."""
    store = open_store(env["TRTFARM_STORE"])
    return {t: p.manifest if (p := read_pointer(store, key)[0]) else None for t, key in POINTERS.items()}


def rows(proc) -> dict[str, dict]:
    return {r["target"]: r for r in json.loads(proc.stdout)}


def words(proc) -> str:
    return " ".join(proc.stdout.split())


def test_a_rebuild_of_regenerated_bytes_after_a_profiles_build_releases_its_plan_on_both_targets(farm):
    root, env = farm
    run(env, "build", regenerated(root / "enc", 0, PAST), "--target", "rtx4090-rtx1.7")
    first = served(env)["rtx4090-rtx1.7"]
    run(env, "build", regenerated(root / "enc", 0, FUTURE), "--profiles", str(root / "profiles.yaml"))
    assert served(env)["rtx4090-rtx1.7"] != first  # the --profiles plan is released on both targets
    again = run(env, "build", regenerated(root / "enc", 0, FUTURE + 60))
    text = words(again)
    assert "released: encoder/rtx-4090" in text and "not released" not in text, again.stdout
    now = served(env)
    assert now["rtx4090-rtx1.7"] == first, again.stdout  # the plan the export and fleet give now
    assert now["rtx5090-rtx1.7"].rsplit("/", 2)[1] == first.rsplit("/", 2)[1]  # one build, one plan on both
    report = rows(run(env, "build", str(root / "enc" / "model.onnx"), "--json"))
    assert all(r["status"] == "up-to-date" and r["release"].startswith("released:") for r in report.values()), report


def test_the_plans_of_one_export_record_its_first_build_not_its_file_times(farm):
    root, env = farm
    before = datetime.now(timezone.utc)
    run(env, "build", regenerated(root / "enc", 0, PAST))
    run(env, "build", regenerated(root / "enc", 0, FUTURE), "--profiles", str(root / "profiles.yaml"))
    store = open_store(env["TRTFARM_STORE"])
    places = {read_manifest(store, k).model.exported_at for k in store.list("plans/") if k.endswith("manifest.json")}
    assert len(places) == 1, places  # four manifests (two builds x two targets), one place
    place = datetime.fromisoformat(places.pop())
    assert before <= place <= datetime.now(timezone.utc), place  # when it was first built: not 2001, not 2030


def test_a_rebuild_held_by_a_newer_export_names_what_holds_it_and_the_command_that_moves_it(farm):
    root, env = farm
    run(env, "build", regenerated(root / "old", 0, FUTURE))  # an older export, with a newer file time
    run(env, "build", regenerated(root / "new", 1, PAST))
    newer = served(env)
    again = run(env, "build", regenerated(root / "old", 0, FUTURE + 60))
    assert served(env) == newer, again.stdout  # the newer export keeps the release
    text = words(again)
    held = newer["rtx4090-rtx1.7"].rsplit("/", 2)[1]
    mine = rows(run(env, "build", str(root / "old" / "model.onnx"), "--json"))["rtx4090-rtx1.7"]
    assert mine["status"] == "up-to-date" and mine["release"].startswith("not released:"), mine
    ref = f"encoder/rtx-4090/{mine['manifest'].rsplit('/', 2)[1]}"
    assert f"not released: encoder/rtx-4090 {TOOLCHAIN} stays at {held}, not {ref.rsplit('/', 1)[1]}" in text, text
    assert f"trtfarm release {ref} --rollback --reason" in text, text
    assert "2 up-to-date; 2 not released" in text, text
    run(env, "release", ref, "--rollback", "--reason", "back to the older export on purpose")
    assert served(env)["rtx4090-rtx1.7"].rsplit("/", 2)[1] == ref.rsplit("/", 1)[1]


def test_on_the_built_in_fleet_the_command_a_held_rebuild_names_moves_the_release(farm):
    root, env = farm
    env = {k: v for k, v in env.items() if k != "TRTFARM_TARGETS"}  # no fleet file: this machine's built-in fleet
    (root / "gpu_targets.yaml").unlink()
    run(env, "build", regenerated(root / "old", 0, FUTURE))
    run(env, "build", regenerated(root / "new", 1, PAST))
    again = words(run(env, "build", regenerated(root / "old", 0, FUTURE + 60)))
    [command] = [line.split(" to go back")[0] for line in again.split("Use ")[1:] if "rtx-4090/" in line]
    assert command.startswith("trtfarm release encoder/rtx-4090/") and command.endswith("--reason ..."), again
    ref = command.split()[2]
    run(env, "release", ref, "--rollback", "--reason", "back on purpose")  # the build's own release policy
    pointer = read_pointer(open_store(env["TRTFARM_STORE"]), f"releases/encoder/rtx-4090/{TOOLCHAIN}.json")[0]
    assert pointer.manifest.rsplit("/", 2)[1] == ref.rsplit("/", 1)[1] and pointer.current.action == "rollback"


def test_registering_the_same_bytes_again_keeps_their_first_place(farm):
    from trtfarm.publishing.registry import export_place, register_export

    root, env = farm
    store = open_store(env["TRTFARM_STORE"])
    first = register_export(store, encoder_export(root / "a", 0))
    other = register_export(store, encoder_export(root / "b", 1))
    again = register_export(store, encoder_export(root / "c", 0))
    records = [json.loads(store.get(f"models/encoder/{r.export_id}/export.json").data) for r in (first, other, again)]
    assert again.export_id > other.export_id > first.export_id  # the newest registration is still the one built
    assert records[0]["onnx_digest"] == records[2]["onnx_digest"] != records[1]["onnx_digest"]
    place = export_place(store, "encoder", records[2]["onnx_digest"], records[2]["registered_at"])
    assert place == datetime.fromisoformat(records[0]["registered_at"]).isoformat(timespec="microseconds")
    assert place < export_place(store, "encoder", records[1]["onnx_digest"], records[1]["registered_at"])


def test_a_registered_export_takes_the_first_registration_of_its_bytes(farm):
    from trtfarm.pipeline import run_local
    from trtfarm.planning.requests import MatrixRequest
    from trtfarm.publishing.registry import register_export

    root, env = farm
    store = open_store(env["TRTFARM_STORE"])
    request = MatrixRequest(store=store.uri, targets_file=env["TRTFARM_TARGETS"], dispatch="local", model="encoder")
    first = register_export(store, encoder_export(root / "x", 0))
    run_local(request, report="none")
    register_export(store, encoder_export(root / "y", 1))
    run_local(request, report="none")
    newer = served(env)
    again = encoder_export(root / "x-again", 0)  # the first bytes again, with other profiles: a new build of them
    (again / "farm.yaml").write_text((again / "farm.yaml").read_text().replace("1x16:16x128:32x512", "1x8:8x64:16x256"))
    register_export(store, again)
    rows = {r.outcome.target: r.outcome for r in run_local(request, report="none")}
    assert served(env) == newer  # the second export, registered after the first bytes, keeps the release
    assert {o.status for o in rows.values()} == {"built"} and \
        all(o.release.action == "refused" and "older" in o.release.why for o in rows.values()), rows
    record = json.loads(store.get(f"models/encoder/{first.export_id}/export.json").data)
    built = read_manifest(store, rows["rtx4090-rtx1.7"].manifest_key)
    assert built.model.exported_at == datetime.fromisoformat(record["registered_at"]).isoformat(timespec="microseconds")


def test_one_exports_plans_are_never_older_than_each_other_whatever_they_recorded():
    from types import SimpleNamespace as NS

    from trtfarm.publishing.release import _older

    def manifest(digest, at):
        return NS(model=NS(onnx_digest=digest, exported_at=at))

    pointer = NS(onnx_digest="a" * 64, exported_at="2030-01-01T00:00:00+00:00")
    assert not _older(manifest("a" * 64, "2001-01-01T00:00:00+00:00"), pointer)  # the same bytes: one export
    assert _older(manifest("b" * 64, "2001-01-01T00:00:00+00:00"), pointer)
    assert not _older(manifest("b" * 64, "2030-01-01T00:00:00.500000+00:00"), pointer)
    assert not _older(manifest("b" * 64, "2029-12-31T23:00:00-02:00"), pointer)  # 01:00 UTC: earlier as text only
