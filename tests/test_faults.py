"""Faults beside the bad-input catalogue (issue 23): the store's filesystem, a store endpoint that stops answering,
damaged store objects, local copies passed where store objects belong, and user text that looks like markup.

Each runs `python -m trtfarm` as a user would and asserts the exit code, one `error:` line naming the problem, no
traceback, nothing half-published, and (where the cause can be removed) that the rerun completes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from . import endpoints, forkcli
from .conftest import ENCODER_PROFILE, RTX_FLEET

PROFILE = [a for p in ENCODER_PROFILE for a in ("--profile", p)]
RELEASING_FLEET = RTX_FLEET.replace("toolchain: rtx-1.7}", "toolchain: rtx-1.7, release_on: built}")


def trtfarm(cwd: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TRTFARM_"))}
    base.update(COLUMNS="200", PREFECT_HOME=str(cwd / "prefect-home"))
    return forkcli.trtfarm(args, cwd=cwd, env={**base, **(env or {})}, timeout=timeout)


def one_error(done: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The one ``error:`` line of a refused command, checked for its exit code, its words and no traceback."""
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def work(tmp_path, example_dir) -> Path:
    shutil.copytree(example_dir, tmp_path / "export")
    (tmp_path / "fleet.yaml").write_text(RELEASING_FLEET)
    return tmp_path


def build(work: Path, store: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return trtfarm(work, "build", str(work / "export/model.onnx"), "--targets-file", str(work / "fleet.yaml"),
                   "--store", store, *PROFILE, *extra, env=env)


def published(store: Path) -> list[str]:
    return sorted(p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file()
                  and p.relative_to(store).parts[0] in ("plans", "releases"))


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the given size and options (a real ENOSPC, a real read-only filesystem); unmounted after."""
    mounts = []

    def mount(name: str, options: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
        mounts.append(path)
        return path

    yield mount
    for path in reversed(mounts):
        subprocess.run(["umount", "-l", str(path)], check=False)


# --- the store's filesystem ----------------------------------------------------------------------------------------
def test_a_read_only_store_is_one_line_naming_it_and_the_rerun_on_a_writable_one_completes(work, tmpfs):
    ro = tmpfs("ro", "size=64m,ro")
    line = one_error(build(work, str(ro / "store")), 1, str(ro / "store"), "Read-only file system")
    assert "give a writable --store" in line
    subprocess.run(["mount", "-o", "remount,rw", str(ro)], check=True)  # the cause removed
    rerun = build(work, str(ro / "store"), "--json")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {r["status"] for r in json.loads(rerun.stdout)} == {"built", "skipped"}


# The example's plan is 2,430,332 bytes (594 pages of tmpfs); its provenance and manifest are written after it, each
# about a page. One target (a build of its own): with 400k its plan does not fit; with 2380k (595 pages) the plan
# fits and what is written after it (its provenance, then its manifest) does not.
@pytest.mark.parametrize("size,fails", [("400k", ("model.plan",)), ("2380k", ("provenance-", "manifest.json"))])
def test_a_full_store_publishes_nothing_half_way_and_the_rerun_after_freeing_space_completes(work, tmpfs, size,
                                                                                            fails):
    full = tmpfs("full", f"size={size}")
    store = full / "store"
    one_target = ("--target", "rtx3090-rtx1.7-o5")
    line = one_error(build(work, str(store), *one_target), 1, str(store), "No space left on device",
                     "free space there")
    written = line.split("cannot write ", 1)[1].split(":", 1)[0]
    assert any(name in written.rsplit("/", 1)[1] for name in fails), line
    assert not [k for k in published(store) if not k.endswith("model.plan")]  # no manifest, no pointer
    assert not [p for p in store.rglob(".tmp-*")], "a temporary was left behind"
    subprocess.run(["mount", "-o", "remount,size=64m", str(full)], check=True)
    rerun = build(work, str(store), *one_target, "--json")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert [r["status"] for r in json.loads(rerun.stdout)] == ["built"]
    manifest = next(k for k in published(store) if k.endswith("manifest.json"))
    doc = json.loads((store / manifest).read_text())  # a plan the failed run left is adopted: it is whole
    assert doc["plan"]["sha256"] == hashlib.sha256((store / doc["plan"]["key"]).read_bytes()).hexdigest()


def test_a_full_tmpdir_is_one_line_naming_the_scratch_folder(work, tmpfs):
    scratch = tmpfs("scratch", "size=64k")
    line = one_error(build(work, str(work / "store"), env={"TMPDIR": str(scratch)}), 1, "local scratch space",
                     "No space left on device", "TMPDIR")
    assert str(scratch) in line
    assert published(work / "store") == [] and list(scratch.iterdir()) == []
    assert build(work, str(work / "store")).returncode == 0


# --- a store endpoint that stops answering -------------------------------------------------------------------------
@pytest.fixture
def silent_endpoint():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    with endpoints.silent_endpoint() as url:
        yield url


@pytest.mark.parametrize("kind", ["silent", "not-listening"])
def test_a_store_endpoint_that_does_not_answer_fails_within_its_budget_naming_it(work, silent_endpoint, kind):
    endpoint = silent_endpoint if kind == "silent" else endpoints.closed_endpoint()
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_DEFAULT_REGION": "us-east-1", "TRTFARM_S3_READ_TIMEOUT": "1", "TRTFARM_S3_CONNECT_TIMEOUT": "1",
           "TRTFARM_S3_MAX_ATTEMPTS": "2"}
    start = time.monotonic()
    done = build(work, "s3://plans/farm", env=env)
    took = time.monotonic() - start
    line = one_error(done, 3, f"the S3 endpoint {endpoint} did not answer", "after 2 attempt(s)",
                     "TRTFARM_S3_READ_TIMEOUT")
    assert took < 30, f"took {took:.0f} s"
    if kind == "silent":  # a timeout's wait is shown before it happens, once
        assert done.stderr.count("trying again (2 of 2") == 1, done.stderr
    else:  # a refused connection is retried at once: the error line names the tries (-v shows each)
        assert "trying again" not in done.stderr, done.stderr
    assert line.count("error:") == 1


@pytest.mark.parametrize("command", [["plans"], ["gc", "--apply"], ["cache", "ls"]])
def test_listing_commands_against_an_endpoint_that_is_not_there_exit_3_naming_it(work, command):
    endpoint = endpoints.closed_endpoint()
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_DEFAULT_REGION": "us-east-1", "TRTFARM_S3_CONNECT_TIMEOUT": "1", "TRTFARM_S3_MAX_ATTEMPTS": "1"}
    done = trtfarm(work, *command, "--store", "s3://plans/farm", env=env)
    one_error(done, 3, f"the S3 endpoint {endpoint} did not answer", "to list s3://plans/farm/")


@pytest.mark.parametrize("command", [["plans"], ["gc", "--apply"], ["cache", "ls"]])
def test_listing_commands_on_a_store_that_is_a_file_name_it_exit_1(work, command):
    done = trtfarm(work, *command, "--store", str(work / "fleet.yaml"))
    one_error(done, 1, "the artifact store", "cannot list", f"{work / 'fleet.yaml'} is a file, not a folder")


def test_a_bad_timeout_setting_is_refused_naming_it(work):
    env = {"TRTFARM_S3_READ_TIMEOUT": "soon", "AWS_ENDPOINT_URL": endpoints.closed_endpoint()}
    done = build(work, "s3://plans/farm", env=env)
    one_error(done, 2, "TRTFARM_S3_READ_TIMEOUT='soon'", "positive number")


# --- damaged store objects -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_store(tmp_path_factory, example_dir) -> Path:
    """A file store where ``trtfarm build`` built and released the encoder for the RTX targets, once a module: each
    case that damages it gets a copy (``released``)."""
    root = tmp_path_factory.mktemp("faults-released")
    shutil.copytree(example_dir, root / "export")
    (root / "fleet.yaml").write_text(RELEASING_FLEET)
    done = build(root, str(root / "store"))
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "store"


@pytest.fixture
def released(work, built_store) -> tuple[Path, Path]:
    """A copy of ``built_store`` in the case's folder; returns (store, pointer)."""
    store = work / "store"
    shutil.copytree(built_store, store)
    pointers = sorted(store.glob("releases/encoder/*/*.json"))
    assert pointers, published(store)
    return store, pointers[0]


PULL = ["pull", "encoder", "--gpu", "rtx-4090", "--toolchain", "tensorrt_rtx-1.7.1.116"]


def pull(work: Path, *args: str) -> subprocess.CompletedProcess:
    return trtfarm(work, *PULL, "--targets-file", str(work / "fleet.yaml"), *args)


def test_a_pointer_that_is_not_json_is_named_by_pull_repaired_by_build_and_skipped_by_gc(work, released):
    store, pointer = released
    pointer.write_text("{not json")
    rel = pointer.relative_to(store).as_posix()
    one_error(pull(work, "--store", str(store), "--to", str(work / "enc.plan")), 1, rel,
              "not a release pointer", "rerun trtfarm build")
    gc = trtfarm(work, "gc", "--keep", "1", "--store", str(store), "--json")
    assert gc.returncode == 0 and "Traceback" not in gc.stderr, gc.stderr[-3000:]
    assert [rel in s for s in json.loads(gc.stdout)["skipped"]] == [True], gc.stdout
    assert rel in gc.stderr and "keeps every plan" in gc.stderr
    rebuilt = build(work, str(store), "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    notes = [r["release"] for r in json.loads(rebuilt.stdout) if r.get("release")]
    assert any(f"repaired the damaged pointer {rel}" in n and "newest manifest" in n for n in notes), notes
    assert pull(work, "--store", str(store), "--to", str(work / "enc.plan")).returncode == 0


def test_a_pointer_missing_fields_is_rewritten_from_its_history(work, released):
    store, pointer = released
    doc = json.loads(pointer.read_text())
    pointer.write_text(json.dumps({"history": doc["history"]}))
    rebuilt = build(work, str(store), "--json")
    notes = [r["release"] for r in json.loads(rebuilt.stdout) if r.get("release")]
    assert any("rewritten from its history" in n for n in notes), notes
    assert json.loads(pointer.read_text())["manifest"] == doc["manifest"]


@pytest.mark.parametrize("content", ["{}", '{"schema_version": 2}', "[1, 2]"])
def test_verify_of_a_manifest_without_fields_names_it(work, released, content):
    store, pointer = released
    bad = work / "enc.plan.manifest.json"
    bad.write_text(content)
    (work / "enc.plan").write_bytes(b"plan")
    # the manifest beside a pulled plan is damaged or replaced: the plan is refused (exit 1), as verify refuses any
    # mismatch (a manifest path that is not there at all is bad input, exit 2: below)
    one_error(trtfarm(work, "verify", str(work / "enc.plan")), 1, "refused: ", str(bad), "manifest")


def test_verify_of_a_missing_manifest_path_names_it(work):
    missing = work / "nowhere" / "manifest.json"
    one_error(trtfarm(work, "verify", str(missing)), 2, str(missing))


def test_a_damaged_manifest_in_the_store_is_named_by_plans_and_replaced_by_build(work, released):
    store, _ = released
    manifest = sorted(store.glob("plans/**/manifest.json"))[0]
    manifest.write_text('{"schema_version": 2, "model": {}}')
    one_error(trtfarm(work, "plans", "--store", str(store)), 1, manifest.relative_to(store).as_posix(),
              "trtfarm manifest", "Rebuild the plan")
    rebuilt = build(work, str(store), "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "built" in {r["status"] for r in json.loads(rebuilt.stdout)}
    assert json.loads(manifest.read_text())["model"]["name"] == "encoder"


# --- local copies where store objects belong; pull ---------------------------------------------------------------
@pytest.mark.parametrize("content", [b"{not json", b'{"name": "encoder"}'])
def test_a_damaged_export_record_is_named_and_the_reregistered_export_builds(work, content):
    """What a nightly run (``build-matrix`` over the registry) meets: the record's URL, what is wrong, the fix."""
    from trtfarm.errors import CorruptObject
    from trtfarm.pipeline import run_local
    from trtfarm.planning.requests import MatrixRequest

    store = work / "store"
    pushed = trtfarm(work, "models", "push", str(work / "export"), "--store", store.as_uri(), "--json")
    assert pushed.returncode == 0, pushed.stderr
    (record,) = [p for p in (store / "models").rglob("export.json")]
    record.write_bytes(content)
    request = MatrixRequest(model="encoder", store=store.as_uri(), targets_file=str(work / "fleet.yaml"),
                            dispatch="local", profiles=[dict(p.split("=") for p in ENCODER_PROFILE)])
    with pytest.raises(CorruptObject, match=r"export\.json: not an export record .*`trtfarm models push FOLDER`"):
        run_local(request, report="none")
    shutil.rmtree(record.parent)  # the damaged export goes; registered again, the model builds
    assert trtfarm(work, "models", "push", str(work / "export"), "--store", store.as_uri()).returncode == 0
    assert "built" in {r.outcome.status for r in run_local(request, report="none")}


def test_release_of_the_copy_pull_wrote_is_refused_unless_the_store_holds_it(work, released):
    store, pointer = released
    assert pull(work, "--store", str(store), "--to", str(work / "enc.plan")).returncode == 0
    before = pointer.read_bytes()
    copy = work / "enc.plan.manifest.json"
    good = trtfarm(work, "release", str(copy), "--reason", "by hand", "--store", str(store),
                   "--targets-file", str(work / "fleet.yaml"))
    assert good.returncode == 0, good.stderr  # the copy describes a manifest the store holds: that one is released
    assert json.loads(pointer.read_text())["manifest"].startswith("plans/encoder/")
    other = work / "other-store"
    other.mkdir()  # a store that is there but does not hold the manifest
    one_error(trtfarm(work, "release", str(copy), "--reason", "by hand", "--store", str(other)), 2,
              "not released", "not in the store")
    doc = json.loads(copy.read_text())
    doc["plan"]["sha256"] = "0" * 64
    copy.write_text(json.dumps(doc))
    one_error(trtfarm(work, "release", str(copy), "--reason", "by hand", "--store", str(store)), 2,
              "does not match the store's")
    assert json.loads(pointer.read_text())["manifest"] == json.loads(before)["manifest"]


def test_pull_to_an_existing_folder_writes_the_plan_in_it(work, released):
    store, _ = released
    (work / "models").mkdir()
    done = pull(work, "--store", str(store), "--to", str(work / "models"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "models/encoder.plan").is_file() and (work / "models/encoder.plan.manifest.json").is_file()


def test_pull_of_a_plan_whose_bytes_were_swapped_is_a_mismatch_exit_1(work, released):
    store, pointer = released
    plan = store / json.loads(pointer.read_text())["plan_key"]
    data = bytearray(plan.read_bytes())
    data[-1] ^= 0xFF
    plan.write_bytes(bytes(data))
    one_error(pull(work, "--store", str(store), "--to", str(work / "enc.plan")), 1,
              "does not match the manifest's")
    assert not (work / "enc.plan").exists()


# --- user text that looks like markup ------------------------------------------------------------------------------
def test_paths_with_brackets_are_printed_as_text(work):
    store = work / "st[/x]ore [bold]"
    store.parent.mkdir()  # a store is made in a folder that exists: "st["
    done = build(work, str(store))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "st[/x]ore [bold]" in done.stdout.replace("\n", "")
    pulled = pull(work, "--store", str(store), "--to", str(work / "a[/b]" / "enc.plan"))
    assert pulled.returncode == 0 and "a[/b]" in pulled.stdout, pulled.stderr[-3000:]
    missing = trtfarm(work, "show", "plans/[/nope]", "--store", str(store))
    one_error(missing, 2, "no manifest at", "/nope")
