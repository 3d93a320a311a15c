"""Every environment variable trtfarm reads, set to bad values: one line or a clean run, never a traceback.

The variables are found in trtfarm/'s source (every ``"TRTFARM_..."`` string), so a new one fails this test until it
has a command here that reads it. Each runs as a person runs it, against a real store holding a signed release of the
encoder (TensorRT-RTX), and moto's S3 server for the S3 settings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from trtfarm.signing.keys import PemKeySigner
from trtfarm.store import open_store

from . import forkcli
from .conftest import REPO
from .conftest_builds import publish_export
from .test_signing import RELEASED_FLEET, TOOLCHAIN, key_pair

SOURCES = sorted((REPO / "trtfarm").rglob("*.py"))
NAMES = sorted({n for p in SOURCES for n in re.findall(r"\"(TRTFARM_[A-Z0-9_]+)\"", p.read_text())})
# set by trtfarm for its own processes, not by a user: a worker image's build; the socket of the warm interpreter
# `trtfarm worker` passes to its runs' command (any other value: the run starts fresh, with one line saying why)
WRITTEN_ONLY = {"TRTFARM_TOOLCHAIN_FLAVOUR": "trtfarm/workers/images.py",
                "TRTFARM_WARM_ENGINE": "trtfarm/workers/run_engine.py"}
BAD = ["", " ", "100000000000d", "-1", "nan", "1e400", "/nonexistent/x", "{folder}", "{file}", "{ro}/x",
       "über\tx"]
PULL = ["pull", "encoder", "--gpu", "rtx-4090", "--toolchain", TOOLCHAIN, "--to", "{out}/got.plan",
        "--targets-file", "{fleet}", "--store", "{store}"]
# the command that reads each variable, and the variables it needs set to good values to get that far
COMMANDS = {
    "TRTFARM_CACHE_DIR": (["status", "--targets-file", "{fleet}", "--store", "{store}"], {}),
    "TRTFARM_HOME": (["images", "build", "--targets-file", "{fleet}"], {}),
    "TRTFARM_RELEASE_MAX_AGE": (PULL, {"TRTFARM_TRUSTED_KEYS": "{public}"}),
    "TRTFARM_RELEASE_STATE": (PULL, {"TRTFARM_TRUSTED_KEYS": "{public}"}),
    "TRTFARM_TRUSTED_KEYS": (PULL, {}),
    "TRTFARM_SIGNING_KEY": (["sign", "--store", "{store}"], {}),
    "TRTFARM_STORE": (["plans"], {}),
    "TRTFARM_TARGETS": (["targets"], {}),
    "TRTFARM_S3_CONNECT_TIMEOUT": (["plans", "--store", "{s3}"], {}),
    "TRTFARM_S3_READ_TIMEOUT": (["plans", "--store", "{s3}"], {}),
    "TRTFARM_S3_MAX_ATTEMPTS": (["plans", "--store", "{s3}"], {}),
    "TRTFARM_WEBHOOK_SECRET": (["webhook", "serve", "--port", "0", "--store", "{store}"],
                               {"PREFECT_API_URL": "http://127.0.0.1:9/api"}),
    "TRTFARM_WORKER_IMAGE": (["build", "{onnx}", "--store", "{out}/s", "--targets-file", "{fleet}"],
                             {"TRTFARM_SIGNING_KEY": "{private}"}),
    "TRTFARM_WORKER_NAME": (["build", "{onnx}", "--store", "{out}/s", "--targets-file", "{fleet}"],
                            {"TRTFARM_SIGNING_KEY": "{private}"}),
    "TRTFARM_WORKER_POOL": (["build", "{onnx}", "--store", "{out}/s", "--targets-file", "{fleet}"],
                            {"TRTFARM_SIGNING_KEY": "{private}"}),
}


def trtfarm(*args: str, env: dict[str, str], cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command as a person runs it, with none of this shell's TRTFARM_ settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRTFARM_")}
    return forkcli.trtfarm(args, env={**base, "COLUMNS": "200", **env}, cwd=cwd, timeout=timeout)


def served(*args: str, env: dict[str, str], cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """A command that serves until stopped (``webhook serve``), as a person runs it: stopped (SIGTERM, as Ctrl-C in a
    service manager) once it says it serves; what it printed either way. An exit before that is its answer."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRTFARM_")}
    with subprocess.Popen([sys.executable, "-m", "trtfarm", *args], env={**base, "COLUMNS": "200", **env}, cwd=cwd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        timer = threading.Timer(timeout, proc.kill)  # a receiver that neither serves nor exits: killed, then failed
        timer.start()
        said = []
        for line in proc.stderr:
            said.append(line)
            if "Uvicorn running on" in line:
                proc.terminate()
        timer.cancel()
        stderr = "".join(said)
    assert proc.returncode != -9, f"neither served nor exited within {timeout} s: {stderr[-2000:]}"
    return subprocess.CompletedProcess(proc.args, 0 if "Uvicorn running on" in stderr else proc.returncode, "",
                                       stderr)


def test_every_variable_in_the_source_has_a_command_here():
    assert sorted(set(COMMANDS) | set(WRITTEN_ONLY)) == NAMES
    for name, where in WRITTEN_ONLY.items():
        assert [p.relative_to(REPO).as_posix() for p in SOURCES if name in p.read_text()] == [where]


@pytest.fixture(scope="module")
def world(tmp_path_factory, s3_endpoint):
    import boto3

    root = tmp_path_factory.mktemp("env")
    fleet = root / "gpu_targets.yaml"
    fleet.write_text(RELEASED_FLEET)
    private, public = key_pair(root, "worker")
    store = open_store((root / "store").as_uri())
    publish_export(store, fleet, root / "encoder", 0, 1_700_000_000, ["rtx-4090-rtx1.7"], signer=PemKeySigner(private))
    boto3.client("s3").create_bucket(Bucket="env-values")
    (root / "folder").mkdir()
    (root / "file").write_text("not a key\n")
    ro = root / "ro"  # a read-only file system (root ignores a folder's permissions)
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], check=True)
    yield {"fleet": fleet, "store": store.uri, "public": public, "private": private, "s3": "s3://env-values/x",
           "onnx": root / "encoder" / "model.onnx", "folder": root / "folder", "file": root / "file", "ro": ro}
    subprocess.run(["umount", "-l", str(ro)], check=False)


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_bad_values_are_one_line_never_a_traceback(world, tmp_path, name):
    from concurrent.futures import ThreadPoolExecutor

    serving = name == "TRTFARM_WEBHOOK_SECRET"  # receivers start up idle on their sockets: all at once
    with ThreadPoolExecutor(max_workers=len(BAD) if serving else 3) as pool:  # each value in a folder of its own
        list(pool.map(lambda i: _one_bad_value(world, tmp_path / f"v{i}", name, BAD[i]), range(len(BAD))))


def _one_bad_value(world: dict, out, name: str, value: str) -> None:
    out.mkdir()
    args, needs = COMMANDS[name]
    fill = {**{k: str(v) for k, v in world.items()}, "out": str(out)}
    env = {"XDG_STATE_HOME": str(out / "state")} | {k: v.format(**fill) for k, v in needs.items()} | \
        {name: value.format(**fill)}
    serving = name == "TRTFARM_WEBHOOK_SECRET"  # a receiver that takes the value serves until stopped: exit 0
    done = (served if serving else trtfarm)(*(a.format(**fill) for a in args), env=env, cwd=out, timeout=300)
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "Traceback" not in done.stderr, (name, value, done.stderr[-3000:])
    assert done.returncode in (0, 1, 2, 3), (name, value, done.returncode, done.stderr[-2000:])
    assert done.returncode == 0 or len(errors) == 1, (name, value, done.stderr[-2000:])
    if done.returncode == 0 and "pull" in args:
        assert (out / "got.plan").is_file()
    elif "pull" in args:  # a refused pull leaves nothing at --to
        assert not list(out.glob("got.*")), (name, value, sorted(out.iterdir()))


def test_a_pull_whose_state_folder_is_read_only_is_refused_before_any_byte(world, tmp_path):
    fill = {**{k: str(v) for k, v in world.items()}, "out": str(tmp_path)}
    done = trtfarm(*(a.format(**fill) for a in PULL), cwd=tmp_path,
                   env={"TRTFARM_TRUSTED_KEYS": str(world["public"]),
                        "TRTFARM_RELEASE_STATE": str(world["ro"] / "accepted.json")})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cannot be written" in done.stderr and "TRTFARM_RELEASE_STATE" in done.stderr, done.stderr
    assert not list(tmp_path.glob("got.*")), sorted(tmp_path.iterdir())
    good = trtfarm(*(a.format(**fill) for a in PULL), cwd=tmp_path,
                   env={"TRTFARM_TRUSTED_KEYS": str(world["public"]),
                        "TRTFARM_RELEASE_STATE": str(tmp_path / "state" / "accepted.json")})
    assert good.returncode == 0 and (tmp_path / "got.plan").is_file(), good.stderr
