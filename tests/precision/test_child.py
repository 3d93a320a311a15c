"""The precision step runs in a process of its own: its result and errors come back typed, and Ctrl-C is clean.

Commands here are the real command line in a process of its own (``cli``; test_unchecked_modelopt.py fakes another
ModelOpt with it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trtfarm.precision.child import ChildTraceback, StepProcessLost, result_in_child
from trtfarm.precision.recipe import GateFailed

from ..conftest import REPO, write_overflow_model

pytestmark = pytest.mark.integration


def cli(args: list[str], cwd: Path, fake_modelopt: str | None = None, **popen) -> subprocess.Popen:
    """``python -m trtfarm ARGS`` in ``cwd`` (its TMPDIR there too); ``fake_modelopt``: the version metadata says."""
    env = {**os.environ, "TMPDIR": str(cwd / "tmp"), "COLUMNS": "2000", "PREFECT_HOME": str(cwd / ".prefect")}
    env.pop("PREFECT_API_URL", None)
    (cwd / "tmp").mkdir(exist_ok=True)
    if fake_modelopt:
        dist = cwd / "fake" / f"nvidia_modelopt-{fake_modelopt}.dist-info"
        dist.mkdir(parents=True, exist_ok=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-modelopt\nVersion: {fake_modelopt}\n")
        env["PYTHONPATH"] = os.pathsep.join([str(cwd / "fake"), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def finished(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture
def importable(monkeypatch):
    """The functions below, importable by name in the child (as the step's are): the checkout on its path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _pid_and_path(path: Path) -> tuple[int, Path]:
    return os.getpid(), path


def _refuse(what: str) -> None:
    raise GateFailed(f"{what}: max error 0.5 above 0.01")


def _bug() -> None:
    {}["missing"]  # noqa: B018 - a bug of trtfarm's own


def _killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_function_runs_in_another_process_and_its_result_comes_back_typed(tmp_path, importable):
    pid, path = result_in_child(_pid_and_path, tmp_path / "x.onnx")
    assert pid != os.getpid() and path == tmp_path / "x.onnx" and isinstance(path, Path)


def test_an_error_comes_back_as_the_same_kind_with_the_same_message_and_the_childs_traceback(importable):
    with pytest.raises(GateFailed, match=r"^model\.onnx: max error 0\.5 above 0\.01$") as refused:
        result_in_child(_refuse, "model.onnx")
    assert refused.value.exit_code == 2
    assert isinstance(refused.value.__cause__, ChildTraceback) and "_refuse" in str(refused.value.__cause__)
    with pytest.raises(KeyError, match="missing") as bug:  # a bug keeps its traceback, the child's included
        result_in_child(_bug)
    assert "{}[\"missing\"]" in str(bug.value.__cause__)


def test_a_child_killed_before_it_answered_is_said_in_one_line(importable):
    with pytest.raises(StepProcessLost, match=r"killed by SIGKILL before it answered \(SIGKILL is what the kernel's "
                                              r"out-of-memory killer sends: give the step less with --max-memory"):
        result_in_child(_killed)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _working(cwd: Path) -> bool:
    """Whether the step's process has written in its temporary folder: it is converting (a Ctrl-C lands mid-way)."""
    return any((cwd / "tmp").glob("trtfarm-step-*/*"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the step's process in /proc")
def test_ctrl_c_during_the_step_stops_both_processes_with_one_line_and_leaves_no_temporary(tmp_path):
    model, heldout = write_overflow_model(tmp_path)
    # a terminal sends Ctrl-C to its foreground process group: the command's (the step's child has its own session)
    proc = cli(["precision", str(model), "--mode", "int8", "--calibration", str(heldout)], tmp_path,
               start_new_session=True)
    deadline = time.monotonic() + 120
    while not _working(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    steps = _children(proc.pid)
    assert steps and _working(tmp_path), "the step's process never started its work"
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = finished(proc, timeout=60)
    assert code == 130, out + err  # not 0: stopped mid-way
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("stopped (Ctrl-C)"), err
    assert all(not Path(f"/proc/{pid}").exists() for pid in steps), "the step's process outlived the command"
    assert list((tmp_path / "tmp").iterdir()) == [], "a temporary was left"
