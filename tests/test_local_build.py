"""`trtfarm build` as the core pipeline: no Prefect at all, any number at once, and reruns that finish a killed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trtfarm.publishing.publish import read_manifest
from trtfarm.store import open_store

from . import forkcli
from .fleets import ONE_RTX_TARGET
from .test_signing import key_pair

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]


@pytest.fixture
def workdir(tmp_path, example_dir):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def env_for(cwd: Path, **extra) -> dict:
    env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(cwd / "tmp"), **extra}
    env.pop("PREFECT_API_URL", None)
    return env


def build(cwd: Path, model: Path, *args, env=None, check=True) -> subprocess.CompletedProcess:
    proc = forkcli.trtfarm(["build", model, "--json", *args], cwd=cwd, env=env or env_for(cwd), timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def test_a_local_build_runs_where_prefect_cannot_be_imported(workdir, example_dir):
    shadow = workdir / "shadow" / "prefect"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('prefect is not allowed in a local build')\n")
    env = env_for(workdir, PYTHONPATH=os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")]))
    rows = json.loads(build(workdir, example_dir / "model.onnx", env=env).stdout)
    assert [(r["target"], r["status"]) for r in rows] == [("rtx-4090-rtx1.7", "built")]
    rerun = json.loads(build(workdir, example_dir / "model.onnx", env=env).stdout)
    assert [r["status"] for r in rerun] == ["up-to-date"]
    assert not (workdir / ".prefect").exists() and not list((workdir / "tmp").glob("trtfarm-build-*"))


def test_eight_builds_of_one_model_at_once_all_succeed_and_publish_once(workdir, example_dir):
    procs = [subprocess.Popen([*TRTFARM, "build", str(example_dir / "model.onnx"), "--json"], cwd=workdir,
                              env=env_for(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-2000:] for _, err in outs]
    rows = [json.loads(out)[0] for out, _ in outs]
    assert {r["status"] for r in rows} <= {"built", "up-to-date"} and len({r["manifest"] for r in rows}) == 1
    store = open_store(str(workdir / "trtfarm-store"))
    manifests = [k for k in store.list("plans/") if k.endswith("manifest.json")]
    assert len(manifests) == 1
    m = read_manifest(store, manifests[0])
    assert store.size(m.plan.key) == m.plan.bytes
    pointer = json.loads(store.get("releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json").data)
    assert pointer["manifest"] == manifests[0] and len(pointer["history"]) == 1


def test_a_plan_published_but_never_released_is_released_by_the_rerun_signed(workdir, example_dir):
    """The state a build killed between its manifest and its release pointer leaves behind, on a signing farm.

    The rerun finds the plan up to date and releases it: with the worker's key in the environment that release is
    a signed claim like any build's (a serving host with trusted keys pulls it), and so is the repair of a damaged
    pointer; the same rerun without a key releases it unsigned, and `trtfarm sign` signs it.
    """
    private, public = key_pair(workdir, "worker")
    signing = env_for(workdir, TRTFARM_SIGNING_KEY=str(private))
    first = json.loads(build(workdir, example_dir / "model.onnx", env=signing).stdout)[0]
    assert first["release"].startswith("released:")
    store = open_store(str(workdir / "trtfarm-store"))
    pointer = "releases/encoder/rtx-4090/tensorrt_rtx-1.7.1.116.json"
    pull = [*TRTFARM, "pull", "encoder", "--gpu", "rtx-4090", "--toolchain", "tensorrt_rtx-1.7.1.116", "--json"]
    serving = env_for(workdir, TRTFARM_TRUSTED_KEYS=str(public), TRTFARM_RELEASE_STATE=str(workdir / "host.json"))
    for n, (damage, key, signed) in enumerate((("delete", signing, True), (b"{not json", signing, True),
                                               ("delete", None, False))):
        if damage == "delete":
            store.delete(pointer)
        else:
            store.compare_and_swap(pointer, damage, store.get(pointer).etag)
        rerun = json.loads(build(workdir, example_dir / "model.onnx", env=key).stdout)[0]
        assert rerun["status"] == "up-to-date" and "released: " in rerun["release"], rerun
        claim = json.loads(store.get(pointer).data)["claim"]
        assert (claim is not None) == signed, (damage, rerun["release"])
        pulled = subprocess.run([*pull, "--to", f"host/{n}.plan"], cwd=workdir, env=serving,
                                capture_output=True, text=True, timeout=120)
        if signed:
            assert pulled.returncode == 0 and json.loads(pulled.stdout)["signature"] == "signed", pulled.stderr
        else:
            assert pulled.returncode == 1 and "unsigned release" in pulled.stderr and "trtfarm sign" in \
                pulled.stderr, pulled.stderr
    signed_later = subprocess.run([*TRTFARM, "sign", "encoder"], cwd=workdir, env=signing, capture_output=True,
                                  text=True, timeout=120)
    assert signed_later.returncode == 0, signed_later.stderr
    again = subprocess.run([*pull, "--to", "host/signed.plan"], cwd=workdir, env=serving, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stderr


def test_a_damaged_plan_object_is_rebuilt_not_reported_up_to_date(workdir, example_dir):
    first = json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]
    store = open_store(str(workdir / "trtfarm-store"))
    key = first["manifest"].split("/trtfarm-store/", 1)[1]
    m = read_manifest(store, key)
    plan = workdir / "trtfarm-store" / m.plan.key
    plan.write_bytes(plan.read_bytes()[: m.plan.bytes // 2])  # a truncated upload
    again = json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]
    assert again["status"] == "built"
    repaired = read_manifest(store, key)
    assert store.size(repaired.plan.key) == repaired.plan.bytes
    store.download_file(repaired.plan.key, workdir / "check.plan", sha256=repaired.plan.sha256)


def _leftovers(workdir: Path, store: Path) -> list[Path]:
    """Scratch folders in TMPDIR and in-flight files in the store: what an interrupted build must not leave."""
    return [*(workdir / "tmp").glob("trtfarm-*"), *(store.rglob(".tmp-*") if store.exists() else [])]


@pytest.mark.parametrize("delay_s", [0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4])
def test_a_signal_anywhere_in_a_build_leaves_no_temporary_files_or_folders(workdir, example_dir, delay_s):
    """SIGTERM (and SIGINT, on alternate delays) at a spread of moments after the build folder appears: in the build,
    in the publish, in the cleanup itself. Each run exits 143/130 (or 0 if it finished first) and leaves nothing."""
    sig = signal.SIGINT if int(delay_s * 100) % 2 else signal.SIGTERM
    interrupted = 0
    for attempt in range(4):  # the build is short: retry until the signal lands inside it
        store = workdir / f"store-{attempt}"
        proc = subprocess.Popen([*TRTFARM, "build", str(example_dir / "model.onnx"), "--store", str(store)],
                                cwd=workdir, env=env_for(workdir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not list((workdir / "tmp").glob("trtfarm-build-*")) and \
                time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay_s)
        if proc.poll() is None:
            proc.send_signal(sig)
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read().decode(errors="replace")
        # -sig: the signal came after main() returned, while the interpreter shut down (Python has put the default
        # handlers back by then); the build was complete, and the leftover check below still holds
        assert code in (0, 128 + sig, -sig), stderr[-2000:]
        assert "Traceback" not in stderr and "Exception caught" not in stderr, stderr[-2000:]
        assert not _leftovers(workdir, store), (delay_s, sig, _leftovers(workdir, store))
        for k in open_store(str(store)).list("plans/"):  # a manifest only ever names a plan that is there, whole
            if k.endswith("manifest.json"):
                m = read_manifest(open_store(str(store)), k)
                assert open_store(str(store)).size(m.plan.key) == m.plan.bytes
        if code == 128 + sig:  # one line says it stopped, how, and what it left unpublished
            said = [line for line in stderr.splitlines() if line.startswith("stopped (")]
            assert len(said) == 1 and ("Ctrl-C" if sig == signal.SIGINT else "SIGTERM") in said[0], stderr[-2000:]
            assert "the same command again finishes the rest" in said[0], said
            if delay_s == 0.0:  # the build's folder had just appeared: the build is what was left, or (the signal
                # came before the builder registered it) nothing more was published; either way the line says which
                assert ("the build of encoder for " in said[0] and "left unfinished" in said[0]) or \
                    "nothing more was published" in said[0], said
            interrupted += 1
            break
    assert interrupted or delay_s >= 0.2, "the signal never landed inside a build"


def test_bad_names_are_one_line_errors(workdir, example_dir):
    for name in ("../../etc/x", "a/b", ""):
        proc = build(workdir, example_dir / "model.onnx", "--name", name, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) <= 3 and "name" in proc.stderr
    assert not (workdir / "trtfarm-store" / "plans").exists()


def test_a_killed_writers_temporary_files_are_swept_by_the_next_build(workdir, example_dir):
    first = json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]
    folder = (workdir / "trtfarm-store" / first["manifest"].split("/trtfarm-store/", 1)[1]).parent
    stale, fresh = folder / ".tmp-killed", folder / ".tmp-in-flight"
    stale.write_bytes(b"")  # what SIGKILL leaves between the temporary write and the rename
    fresh.write_bytes(b"")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    work = workdir / "tmp" / "trtfarm-build-killed"
    work.mkdir()
    os.utime(work, (time.time() - 7 * 3600,) * 2)
    store = open_store(str(workdir / "trtfarm-store"))
    store.delete(first["manifest"].split("/trtfarm-store/", 1)[1])  # so the rerun builds this plan again
    assert json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]["status"] == "built"
    assert not stale.exists() and fresh.exists()  # a write in flight (younger than an hour) is left alone
    assert not work.exists()
    assert ".tmp-" not in " ".join(store.list(""))


def test_verify_store_rehashes_and_rebuilds_a_plan_whose_bytes_changed_but_not_its_size(workdir, example_dir):
    first = json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]
    store = open_store(str(workdir / "trtfarm-store"))
    m = read_manifest(store, first["manifest"].split("/trtfarm-store/", 1)[1])
    plan = workdir / "trtfarm-store" / m.plan.key
    data = bytearray(plan.read_bytes())
    data[len(data) // 2] ^= 0xFF  # bit rot: same size, other bytes
    plan.write_bytes(bytes(data))
    assert json.loads(build(workdir, example_dir / "model.onnx").stdout)[0]["status"] == "up-to-date"  # size only
    assert json.loads(build(workdir, example_dir / "model.onnx", "--verify-store").stdout)[0]["status"] == "built"
    repaired = read_manifest(store, first["manifest"].split("/trtfarm-store/", 1)[1])
    store.download_file(repaired.plan.key, workdir / "check.plan", sha256=repaired.plan.sha256)


def test_a_store_in_a_folder_called_plans_builds_lists_and_reports(workdir, example_dir):
    """Keys come from the run, never from cutting URLs at '/plans/' (a bucket or folder may be called plans)."""
    (workdir / "plans").mkdir()  # a store is made in a folder that exists (a missing one is a typo, refused)
    store_uri = (workdir / "plans" / "store").as_uri()
    first = json.loads(build(workdir, example_dir / "model.onnx", "--store", store_uri).stdout)
    assert [(r["target"], r["status"]) for r in first] == [("rtx-4090-rtx1.7", "built")]
    table = subprocess.run([*TRTFARM, "build", str(example_dir / "model.onnx"), "--store", store_uri], cwd=workdir,
                           env=env_for(workdir), capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    key = first[0]["manifest"].removeprefix(store_uri + "/")
    parts = key.split("/")  # plans/MODEL/ONNX/GPU/TOOLCHAIN/BUILD/manifest.json
    ref = f"{parts[1]}/{parts[3]}/{parts[5][:12]}"  # what `trtfarm show` takes
    assert "up-to-date" in table.stdout and ref in table.stdout and "store/plans/" not in table.stdout
    listed = subprocess.run([*TRTFARM, "plans", "--store", store_uri, "--wide"], cwd=workdir, env=env_for(workdir),
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and ref in listed.stdout and "yes" in listed.stdout, listed.stdout + listed.stderr
    report = subprocess.run([*TRTFARM, "report", "encoder", "--store", store_uri, "--out", str(workdir / "r"),
                             "--json"], cwd=workdir, env=env_for(workdir), capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["rows"]
    assert row["target"] == "rtx-4090-rtx1.7" and row["build_s"] is not None


def test_the_build_that_creates_a_store_names_it_once(workdir, example_dir, store_uri):
    if store_uri.startswith("file:"):  # a typo'd path next to the real store: a folder that was not there
        store_uri = "./trtfarm-stor"
    lines = []
    for _ in range(2):
        done = build(workdir, example_dir / "model.onnx", "--store", store_uri, "--targets-file", "gpu_targets.yaml")
        assert {r["status"] for r in json.loads(done.stdout)} <= {"built", "up-to-date"}, done.stdout
        lines.append([line for line in done.stderr.splitlines() if line.startswith("new store:")])
    assert lines == [[f"new store: {store_uri.removeprefix('./')}"], []], lines
