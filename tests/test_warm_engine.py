"""A farm run forked from the worker's warm interpreter (flows/warm_engine.py, workers/run_engine.py) against the
same engine started fresh by ``python -m``: the referee is Python itself.

The warm interpreter here serves a small engine of the test's own (``--module``), so each run is a fork and a
fresh interpreter costs 30 ms. The farm tests (tests/flows) run Prefect's engine through it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trtfarm
from flows import warm_engine
from trtfarm.workers.run_engine import SOCKET_ENV

ENGINE = '''\
import json
import os
import signal
import sys
import time

if __name__ == "__main__":
    what = os.environ.get("DO", "exit:0")
    if what.startswith("exit:"):
        sys.exit(int(what[5:]))
    if what.startswith("signal:"):
        os.kill(os.getpid(), int(what[7:]))
        time.sleep(5)
    if what == "show":
        import logging

        settings = sys.modules.get("prefect.settings")
        print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:], "x": os.environ.get("X"), "stdin": sys.stdin.read(),
                          "api": settings and str(settings.get_current_settings().api.url), "pid": os.getpid(),
                          "big": sorted((k, len(v)) for k, v in os.environ.items() if k.startswith("BIG_")),
                          "path": sys.path, "level": logging.getLogger("prefect").level}))
        print("to stderr", file=sys.stderr)
    if what == "wait":
        signal.signal(signal.SIGTERM, lambda s, f: (print("stopping", flush=True), sys.exit(7)))
        print(os.getpid(), flush=True)
        time.sleep(60)
'''


def _serve(home: Path, module: str) -> tuple[subprocess.Popen, Path]:
    sock = home / "engine.sock"
    server = subprocess.Popen([sys.executable, "-m", "flows.warm_engine", "--socket", str(sock),
                               "--home", str(home), "--module", module], stderr=subprocess.PIPE, text=True,
                              env=_env(home, None))
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
        time.sleep(0.05)
    return server, sock


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    home = tmp_path_factory.mktemp("warm")
    (home / "engines").mkdir()  # a module of a package, as prefect.engine is
    (home / "engines" / "__init__.py").write_text("")
    (home / "engines" / "fake_engine.py").write_text(ENGINE)
    server, sock = _serve(home, MODULE)
    yield home, sock, server
    server.terminate()
    server.wait()


def _env(home: Path, sock: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(home), env.get("PYTHONPATH")]))
    if sock is not None:
        env[SOCKET_ENV] = str(sock)
    return {**env, **extra}


MODULE = "engines.fake_engine"


def _both(home: Path, sock: Path, module: str = MODULE, **kw) -> tuple:
    """The same run forked (through the run's command) and fresh (``python -m``)."""
    env, cwd, stdin = kw.pop("env"), kw.pop("cwd", home), kw.pop("input", "")
    forked = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine", *kw.pop("args", [])],
                            env=_env(home, sock, **env), cwd=cwd, input=stdin, capture_output=True, text=True,
                            timeout=60)
    fresh = subprocess.run([sys.executable, "-m", module, *forked.args[3:]], env=_env(home, None, **env), cwd=cwd,
                           input=stdin, capture_output=True, text=True, timeout=60)
    return forked, fresh


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(end=st.one_of(st.integers(0, 255).map(lambda n: f"exit:{n}"),
                     st.sampled_from([signal.SIGTERM, signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV, signal.SIGHUP,
                                      signal.SIGUSR1, signal.SIGQUIT]).map(lambda s: f"signal:{int(s)}")))
def test_a_forked_run_ends_as_the_same_engine_started_fresh(warm, end):
    home, sock, _ = warm
    forked, fresh = _both(home, sock, env={"DO": end})
    assert forked.returncode == fresh.returncode, (end, forked.stderr)


def test_a_forked_run_has_its_own_environment_folder_arguments_and_streams(warm, tmp_path):
    home, sock, _ = warm
    forked, fresh = _both(home, sock, env={"DO": "show", "X": "the run's own"}, cwd=tmp_path,
                          args=["--flag", "a b"], input="from stdin")
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert seen.pop("pid") != warm[2].pid
    expected.pop("pid")
    assert seen["path"][0] == expected["path"][0] == str(tmp_path)
    assert seen == expected == {**expected, "cwd": str(tmp_path), "x": "the run's own", "stdin": "from stdin",
                                "argv": ["--flag", "a b"]}
    assert forked.stderr == fresh.stderr == "to stderr\n"


def test_prefects_settings_in_a_fork_are_the_runs_not_the_warm_interpreters(tmp_path):
    (tmp_path / "prefect_engine.py").write_text("import prefect.flow_engine\n" + ENGINE)  # as prefect.engine does
    server, sock = _serve(tmp_path, "prefect_engine")
    try:
        forked, fresh = _both(tmp_path, sock, module="prefect_engine",
                              env={"DO": "show", "PREFECT_API_URL": "http://127.0.0.1:4999/api",
                                   "PREFECT_LOGGING_LEVEL": "DEBUG"})
        seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
        assert seen["api"] == expected["api"] == "http://127.0.0.1:4999/api"
        assert seen["level"] == expected["level"] == 10  # DEBUG, from the run's environment
    finally:
        server.terminate()
        server.wait()


def _waiting(home: Path, sock: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "trtfarm.workers.run_engine"], env=_env(home, sock, DO="wait"),
                            stdout=subprocess.PIPE, text=True)
    engine = int(proc.stdout.readline())
    assert engine != proc.pid  # a fork of the warm interpreter, not this command
    return proc, engine


def _gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_signal_to_the_runs_command_reaches_its_engine_once(warm):
    home, sock, _ = warm
    proc, engine = _waiting(home, sock)
    proc.send_signal(signal.SIGTERM)  # a cancel, or a termination notice passed on by trtfarm worker
    assert proc.wait(30) == 7
    assert proc.stdout.read() == "stopping\n"
    assert _gone(engine)


def test_killing_the_runs_command_kills_its_engine(warm):
    home, sock, _ = warm
    proc, engine = _waiting(home, sock)
    proc.kill()  # what Prefect's worker does to a run that will not stop, and a lost host to everything
    assert proc.wait(30) == -signal.SIGKILL
    assert _gone(engine)


def test_changed_code_is_never_run_warm_and_the_interpreter_starts_again(tmp_path):
    (tmp_path / "fake_engine.py").write_text(ENGINE)
    server, sock = _serve(tmp_path, "fake_engine")
    try:
        first = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], env=_env(tmp_path, sock,
                               DO="exit:3"), capture_output=True, text=True, timeout=60)
        assert (first.returncode, first.stderr) == (3, "")
        (tmp_path / "fake_engine.py").write_text(ENGINE.replace("sys.exit(int(what[5:]))", "sys.exit(40)"))
        # the next run: the new code, in a fresh interpreter (here `python -m prefect.engine`: no run, exit 1)
        fresh = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], env=_env(tmp_path, sock,
                               DO="exit:3"), capture_output=True, text=True, timeout=120)
        assert "did not fork this run: its code changed since it started" in fresh.stderr
        assert "Invalid flow run id" in fresh.stderr and fresh.returncode == 1
        deadline = time.monotonic() + 60
        while True:  # then it starts again (same process), and the new code runs warm
            again = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], env=_env(tmp_path, sock,
                                   DO="exit:3"), capture_output=True, text=True, timeout=120)
            if again.returncode == 40 and not again.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (again.returncode, again.stderr) == (40, "")
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait()


def test_no_warm_interpreter_means_prefects_own_engine_with_a_line_that_says_so(tmp_path):
    run = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"],
                         env=_env(tmp_path, tmp_path / "nothing.sock"), capture_output=True, text=True, timeout=120)
    assert run.stderr.startswith(f"trtfarm: no warm interpreter at {tmp_path / 'nothing.sock'}")
    assert "Invalid flow run id" in run.stderr and run.returncode == 1  # prefect.engine itself, with no run


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_another_users_process_is_never_forked(warm, tmp_path):
    home, sock, server = warm
    before = set(os.listdir("/proc"))
    run = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                          "trtfarm.workers.run_engine"], env=_env(home, sock, DO="exit:5"), capture_output=True,
                         text=True, timeout=120, cwd="/")
    # refused at the socket (its folder and itself are the worker's user's only) or by the peer's uid
    assert run.stderr.startswith((f"trtfarm: no warm interpreter at {sock} (Permission denied)",
                                  "trtfarm: the warm interpreter went away; starting the run in a fresh interpreter"))
    assert "Traceback" not in run.stderr
    assert server.poll() is None
    assert not [p for p in set(os.listdir("/proc")) - before if p.isdigit() and _parent(p) == server.pid]


def _parent(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_the_warm_interpreter_loads_every_flow_prefect_yaml_deploys():
    deployed = yaml.safe_load((Path(trtfarm.__file__).parent / "templates" / "prefect.yaml").read_text())
    assert {d["entrypoint"].split(":")[0] for d in deployed["deployments"]} == set(warm_engine.ENTRYPOINTS)
    assert {d["work_pool"]["job_variables"]["command"] for d in deployed["deployments"]} == {
        "python -m trtfarm.workers.run_engine"}


SUPERVISOR = """\
import sys
from trtfarm.workers.supervise import supervise
sys.exit(supervise([sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", sys.argv[1]], {}, print,
                   beside=[sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"]))
"""


@pytest.mark.parametrize("how", ["the worker ends", "trtfarm worker is killed"])
def test_the_warm_interpreter_lives_as_long_as_trtfarm_worker(how):
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, "1" if how == "the worker ends" else "600"],
                            stdout=subprocess.PIPE, text=True)
    helper = int(proc.stdout.readline())
    if how == "the worker ends":
        assert proc.wait(60) == 0
    else:
        proc.kill()
        proc.wait()
    assert _gone(helper)


ROLES = ("work-pool", "work-queue", "deployment", "flow", "tag")


@settings(max_examples=200, deadline=None)
@given(placed=st.lists(st.tuples(st.sampled_from(ROLES), st.sampled_from(["rtx-4090", "gpu-h100", "default", "q1"])),
                       max_size=6),
       name=st.sampled_from(["prefect.flow-run.Scheduled", "prefect.flow-run.Pending", "prefect.flow-run.Running"]),
       queues=st.sets(st.sampled_from(["default", "q1"]), max_size=2))
def test_a_worker_takes_a_run_the_server_announces_in_its_pool_and_queues_only(placed, name, queues):
    from prefect.events.schemas.events import Event

    from flows.listening_worker import announces

    event = Event(event=name, resource={"prefect.resource.id": "prefect.flow-run.1"},
                  related=[{"prefect.resource.id": f"prefect.{role}.{i}", "prefect.resource.role": role,
                            "prefect.resource.name": value} for i, (role, value) in enumerate(placed)])
    in_pool = ("work-pool", "rtx-4090") in placed
    in_queue = not queues or any(("work-queue", q) in placed for q in queues)
    assert announces(event, "rtx-4090", queues) == (name == "prefect.flow-run.Scheduled" and in_pool and in_queue)


def test_a_run_with_a_large_environment_is_forked_whole(warm):
    home, sock, _ = warm
    large = {f"BIG_{i}": "x" * 100_000 for i in range(8)}  # more than a socket's buffer: many reads
    forked, fresh = _both(home, sock, env={"DO": "show", **large})
    assert json.loads(forked.stdout)["big"] == json.loads(fresh.stdout)["big"] == [[k, 100_000] for k in large]


@pytest.mark.parametrize(("extra", "why"), [
    ({"PYTHONHASHSEED": "7"}, "the run's PYTHONHASHSEED is not the warm interpreter's"),
    ({"PYTHONPATH": "relative"}, "the run's PYTHONPATH is not the warm interpreter's")])
def test_a_run_python_would_start_otherwise_is_not_forked(warm, extra, why):
    home, sock, _ = warm
    run = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], env={**_env(home, sock, DO="exit:5"),
                         **extra}, capture_output=True, text=True, timeout=120)
    assert run.stderr.startswith(f"trtfarm: the warm interpreter did not fork this run: {why}; starting the run in a "
                                 "fresh interpreter")
    assert "Invalid flow run id" in run.stderr and run.returncode == 1  # prefect.engine itself, with no run


def test_a_relative_python_path_read_from_another_folder_is_not_forked(tmp_path):
    (tmp_path / "fake_engine.py").write_text(ENGINE)
    env = {**_env(tmp_path, None), "PYTHONPATH": "."}  # the folder each starts in
    sock = tmp_path / "engine.sock"
    server = subprocess.Popen([sys.executable, "-m", "flows.warm_engine", "--socket", str(sock), "--module",
                               "fake_engine"], env=env, cwd=tmp_path)
    try:
        wait_for_socket = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < wait_for_socket:
            time.sleep(0.05)
        same = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env={**env, SOCKET_ENV: str(sock), "DO": "exit:6"})
        assert (same.returncode, same.stderr) == (6, "")
        (tmp_path / "elsewhere").mkdir()
        other = subprocess.run([sys.executable, "-m", "trtfarm.workers.run_engine"], cwd=tmp_path / "elsewhere",
                               capture_output=True, text=True, timeout=120,
                               env={**env, SOCKET_ENV: str(sock), "DO": "exit:6"})
        assert "did not fork this run: the run's PYTHONPATH names folders relative to its own" in other.stderr
    finally:
        server.terminate()
        server.wait()


def test_a_command_that_never_sends_its_request_holds_up_no_other_run(warm):
    import socket

    home, sock, _ = warm
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(str(sock))  # and says nothing
    try:
        forked, fresh = _both(home, sock, env={"DO": "exit:4"})
        assert forked.returncode == fresh.returncode == 4 and forked.stderr == ""
    finally:
        stuck.close()
