"""Dispatch latency: what one build child costs on each of Prefect 3.9's execution paths, against a 0.5 s build.

Starts a real `prefect server` on 127.0.0.1 (the integration tests' harness, tests/farm_server.py: PostgreSQL where
that harness provides it, else SQLite; --sqlite forces SQLite), one process worker and one task worker, then runs
N children one at a time (plus one warm-up) from a parent flow, each a stand-in build that sleeps --sleep seconds:

- process-default: `run_deployment` to a process-worker deployment with no `command` job variable (the worker starts
  the workspace supervisor `python -m prefect.runner._workspace_supervisor`, which runs the pull steps and then
  `execvpe`s into a second interpreter, `python -m prefect.engine`);
- process-one-interpreter: the same with the job variable `command: "<python> -m prefect.engine"` (the worker
  starts the engine directly; the engine runs the pull steps itself: one interpreter);
- task-worker: `.delay()` of a task served by `prefect.task_worker.serve` in one long-lived process (websocket push,
  runs on a thread).

Per child: submit -> Running (Prefect's Running state timestamp), submit -> build body start, end to end (submit until
the parent sees the final state) and overhead = end to end - the build body's own time; for process children also
the pickup (submit -> process spawned), the interpreter(s) (spawn -> body) and the finish (body end -> parent sees
it). Medians over N. Then per path one crash probe: the process executing the build is SIGKILLed mid-build and the
probe reports the final state the parent sees, how long it took, and whether Prefect ran the build again.

With ``--server URL`` the bench uses a running Prefect server (its own pool and deployments on it) instead of
starting one. The process worker is started only where a process path is measured.

    python bench/dispatch_latency.py [--n 10] [--sleep 0.5] [--sqlite | --server URL] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prefect import flow, task

REPO = Path(__file__).resolve().parents[1]
POOL = "bench-dispatch"
ENTRYPOINT = "bench/dispatch_latency.py:bench_child"
DEPLOYMENTS = {"process-default": "bench-child/default", "process-one-interpreter": "bench-child/one-interpreter"}
MODES = (*DEPLOYMENTS, "task-worker")
CRASH_SLEEP_S = 8.0


def one_interpreter_command() -> str:
    """The `command` job variable that makes the process worker start `python -m prefect.engine` directly."""
    return f"{sys.executable} -m prefect.engine"


# ---------------------------------------------------------------- the stand-in build (child flow and task)


def _process_started_at() -> float:
    """Wall-clock time this process was spawned (exec keeps it: a supervisor that execs counts from its spawn)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime - started)


def _build(marker: str, sleep_s: float) -> int:
    info = {"pid": os.getpid(), "ppid": os.getppid(), "own_process_group": os.getpgid(0) == os.getpid(),
            "spawned": _process_started_at(), "body_start": time.time(),
            "cwd": os.getcwd(), "cmdline": Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()}
    Path(marker + ".start").write_text(json.dumps(info))
    time.sleep(sleep_s)
    info["body_end"] = time.time()
    Path(marker).write_text(json.dumps(info))
    return os.getpid()


@flow(name="bench-child", retries=1)
def bench_child(marker: str, sleep_s: float = 0.5) -> int:
    """A stand-in build run as a deployment's flow run (retries=1 to show whether a crash is retried)."""
    return _build(marker, sleep_s)


@task(name="bench-build", retries=1)
def bench_build(marker: str, sleep_s: float = 0.5) -> int:
    """The same stand-in build as a task for a task worker."""
    return _build(marker, sleep_s)


# ---------------------------------------------------------------- roles run in subprocesses (farm environment)


async def _setup() -> None:
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.workers.process import ProcessWorker

    async with get_client() as client:
        try:
            await client.create_work_pool(WorkPoolCreate(
                name=POOL, type="process", base_job_template=ProcessWorker.get_default_base_job_template()))
        except ObjectAlreadyExists:
            pass
        flow_id = await client.create_flow_from_name("bench-child")
        pull = [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
        for mode, deployment in DEPLOYMENTS.items():
            variables = {"command": one_interpreter_command()} if mode == "process-one-interpreter" else {}
            await client.create_deployment(flow_id=flow_id, name=deployment.split("/")[1], work_pool_name=POOL,
                                           entrypoint=ENTRYPOINT, pull_steps=pull, job_variables=variables)


def _wait_file(path: Path, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def _record(submitted: float, running: float | None, done: float, body: dict | None, state: str) -> dict:
    rec = {"state": state, "submit_to_running_s": None if running is None else running - submitted,
           "e2e_s": done - submitted}
    if body:
        build_s = body["body_end"] - body["body_start"]
        rec.update(submit_to_body_s=body["body_start"] - submitted, build_s=build_s, overhead_s=rec["e2e_s"] - build_s,
                   pickup_s=body["spawned"] - submitted, start_s=body["body_start"] - body["spawned"],
                   finish_s=done - body["body_end"], pid=body["pid"], own_process_group=body["own_process_group"],
                   cwd=body["cwd"], cmdline=body["cmdline"])
    return rec


def _running_at(states) -> float | None:
    return min((s.timestamp.timestamp() for s in states if s.type.value == "RUNNING"), default=None)


async def _child_process(client, mode: str, marker: Path, sleep_s: float) -> dict:
    from prefect.deployments import run_deployment
    from prefect.flow_runs import wait_for_flow_run

    submitted = time.time()
    run = await run_deployment(DEPLOYMENTS[mode], parameters={"marker": str(marker), "sleep_s": sleep_s}, timeout=0)
    final = await wait_for_flow_run(run.id, timeout=300, client=client)
    done = time.time()
    states = await client.read_flow_run_states(run.id)
    return _record(submitted, _running_at(states), done, _wait_file(marker, 5), final.state.name)


async def _child_task(client, marker: Path, sleep_s: float) -> dict:
    submitted = time.time()
    future = bench_build.delay(str(marker), sleep_s)
    await future.wait_async(timeout=300)
    done = time.time()
    states = await client.read_task_run_states(future.task_run_id)
    rec = _record(submitted, _running_at(states), done, _wait_file(marker, 5), future.state.name)
    rec.pop("pickup_s", None)  # a long-lived process: nothing is spawned per child
    rec.pop("start_s", None)
    return rec


async def _crash_process(client, mode: str, marker: Path) -> dict:
    from prefect.deployments import run_deployment
    from prefect.flow_runs import wait_for_flow_run

    run = await run_deployment(DEPLOYMENTS[mode], parameters={"marker": str(marker), "sleep_s": CRASH_SLEEP_S},
                               timeout=0)
    started = _wait_file(Path(f"{marker}.start"), 120)
    if started is None:
        return {"error": "the child never started its build"}
    os.kill(started["pid"], signal.SIGKILL)
    killed = time.time()
    note = ""
    try:
        final = await wait_for_flow_run(run.id, timeout=90, client=client)
    except Exception as exc:  # noqa: BLE001 - FlowRunWaitTimeout: reported as what the parent sees
        final, note = await client.read_flow_run(run.id), type(exc).__name__
    seen = time.time()
    await asyncio.sleep(10)  # would anything run it again?
    again = await client.read_flow_run(run.id)
    restarted = _wait_file(Path(f"{marker}.start"), 0.1)
    return {"killed_pid": started["pid"], "cmdline": started["cmdline"].strip(), "parent_sees": final.state.name,
            "message": (final.state.message or "")[:200], "kill_to_final_s": round(seen - killed, 2),
            "wait_note": note, "state_10s_later": again.state.name, "run_count": again.run_count,
            "build_ran_again": bool(restarted and restarted["pid"] != started["pid"])}


async def _crash_task(client, marker: Path, home: str) -> dict:
    future = bench_build.delay(str(marker), CRASH_SLEEP_S)
    started = _wait_file(Path(f"{marker}.start"), 120)
    if started is None:
        return {"error": "the task never started"}
    os.kill(started["pid"], signal.SIGKILL)
    await future.wait_async(timeout=30)
    after_kill = (await client.read_task_run(future.task_run_id)).state.name
    # a fresh task worker for the same task key: is the orphaned run delivered again?
    log = open(Path(home) / "task-worker-2.log", "wb")  # noqa: SIM115 - closed below
    second = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", "task-worker"], cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        await future.wait_async(timeout=30)
        after_restart = (await client.read_task_run(future.task_run_id)).state.name
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(10)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()
        log.close()
    restarted = _wait_file(Path(f"{marker}.start"), 0.1)
    return {"killed_pid": started["pid"], "cmdline": started["cmdline"].strip(),
            "parent_sees": future.state.name if future.state else "?", "state_30s_after_kill": after_kill,
            "state_30s_after_new_task_worker": after_restart,
            "build_ran_again": bool(restarted and restarted["pid"] != started["pid"])}


@flow(name="bench-parent")
async def bench_parent(modes: list[str], n: int, sleep_s: float, tmp: str, crash: bool) -> dict:
    """Children of every path, one at a time and round-robin over the paths (so load drift hits all alike):
    process children by run_deployment + wait_for_flow_run as flows/dispatch.py sends them, task children by .delay().
    """
    from prefect import get_client

    records: dict[str, list[dict]] = {mode: [] for mode in modes}
    async with get_client() as client:
        if crash:
            for mode in modes:
                marker = Path(tmp) / f"{mode}-crash.json"
                records[mode].append(await _crash_task(client, marker, tmp) if mode == "task-worker"
                                     else await _crash_process(client, mode, marker))
            return records
        for i in range(n):
            for mode in modes:
                marker = Path(tmp) / f"{mode}-{i}.json"
                records[mode].append(await _child_task(client, marker, sleep_s) if mode == "task-worker"
                                     else await _child_process(client, mode, marker, sleep_s))
    return records


def _role(args: argparse.Namespace) -> None:
    if args.role == "setup":
        asyncio.run(_setup())
    elif args.role == "task-worker":
        from prefect.task_worker import serve

        serve(bench_build, limit=args.limit)
    elif args.role == "parent":
        out = asyncio.run(bench_parent(args.mode.split(","), args.n, args.sleep, args.tmp, args.crash))
        Path(args.out).write_text(json.dumps(out))


# ---------------------------------------------------------------- the driver


def _median(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def _summary(records: list[dict]) -> dict:
    keys = ("submit_to_running_s", "submit_to_body_s", "e2e_s", "overhead_s", "pickup_s", "start_s", "finish_s")
    out = {k: _median(records, k) for k in keys}
    e2e = [r["e2e_s"] for r in records]
    out.update(n=len(records), e2e_min_s=round(min(e2e), 3), e2e_max_s=round(max(e2e), 3),
               states=sorted({r["state"] for r in records}),
               cmdline=records[-1].get("cmdline", "").strip(), cwd=records[-1].get("cwd"),
               own_process_group=records[-1].get("own_process_group"))
    return out


def _wait_log(farm, name: str, needle: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in farm.log(name):
            return
        if farm.procs[name].poll() is not None:
            break
        time.sleep(0.3)
    raise RuntimeError(f"{name} did not get ready:\n{farm.log(name)[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="children per path (after one warm-up)")
    parser.add_argument("--sleep", type=float, default=0.5, help="the stand-in build's seconds")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    parser.add_argument("--no-crash", action="store_true", help="skip the SIGKILL probes")
    parser.add_argument("--sqlite", action="store_true", help="run the Prefect server on SQLite")
    parser.add_argument("--server", help="a running Prefect server's URL (http://HOST:PORT) to use, not a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--role", choices=("setup", "task-worker", "parent"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--crash", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=10, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        _role(args)
        return

    sys.path.insert(0, str(REPO))
    from tests.farm_server import Farm

    modes = [m for m in args.modes.split(",") if m]
    me = [sys.executable, str(Path(__file__).resolve())]
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "platform": platform.platform(), "load_before": os.getloadavg()},
                    "n": args.n, "sleep_s": args.sleep, "one_interpreter_command": one_interpreter_command(),
                    "paths": {}, "crash": {}}
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        home = Path(tmp)
        extra = {}
        if args.sqlite and "database" in inspect.signature(Farm).parameters:
            extra["database"] = f"sqlite+aiosqlite:///{home}/prefect.db"
        farm = Farm(home, {}, server=args.server, **extra)
        try:
            farm.start_server()
            database = str(getattr(farm, "database", None) or "sqlite (the harness's default)")
            result["database"] = "postgresql" if database.startswith("postgresql") else "sqlite"
            if args.server:
                result["database"] = f"the running server's ({args.server})"
            farm.run([*me, "--role", "setup"])
            process_paths = any(m in DEPLOYMENTS for m in modes)
            if process_paths:
                farm.spawn("worker", [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type",
                                      "process", "--name", "bench-worker", "--no-create-pool-if-not-found"])
            farm.spawn("task-worker", [*me, "--role", "task-worker"])
            if process_paths:
                _wait_log(farm, "worker", "started")
            _wait_log(farm, "task-worker", "Subscribing to runs")

            def parent(n: int, crash: bool) -> dict:
                out = home / f"parent-{'crash' if crash else n}.json"
                argv = [*me, "--role", "parent", "--mode", ",".join(modes), "--n", str(n), "--sleep", str(args.sleep),
                        "--tmp", str(home), "--out", str(out)]
                farm.run(argv + (["--crash"] if crash else []), timeout=1800)
                return json.loads(out.read_text())

            result["machine"]["load_1m_during"] = [round(os.getloadavg()[0], 2)]
            records = parent(args.n + 1, crash=False)
            result["machine"]["load_1m_during"].append(round(os.getloadavg()[0], 2))
            for mode in modes:
                samples = records[mode][1:]  # the first child of each path is the warm-up
                result["paths"][mode] = {**_summary(samples), "samples": samples}
            if not args.no_crash:
                probes = parent(1, crash=True)
                result["crash"] = {mode: probes[mode][0] for mode in modes}
                if process_paths:
                    result["crash"]["process_worker_alive_after"] = farm.procs["worker"].poll() is None
        finally:
            farm.stop()
    result["machine"]["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result))
        return
    _print_table(result)


def _print_table(result: dict) -> None:
    load = result["machine"].get("load_1m_during", [])
    print(f"{result['machine']['cpus']} CPUs, 1-min load {load} (start, end of the timed children); Prefect server "
          f"on {result['database']}; {result['n']} children per path, build = sleep {result['sleep_s']} s "
          f"(medians, seconds)")
    cols = ("submit_to_running_s", "submit_to_body_s", "e2e_s", "overhead_s", "pickup_s", "start_s", "finish_s")
    heads = ("submit->Running", "submit->body", "end-to-end", "overhead", "pickup", "interp(s)", "finish")
    print(f"{'path':<26}" + "".join(f"{h:>16}" for h in heads) + f"{'e2e min-max':>14}")
    for mode, s in result["paths"].items():
        cells = "".join(f"{'-' if s[c] is None else format(s[c], '.2f'):>16}" for c in cols)
        print(f"{mode:<26}{cells}{s['e2e_min_s']:>7.2f}-{s['e2e_max_s']:.2f}")
    for mode, probe in result["crash"].items():
        print(f"crash probe {mode}: {probe}")


if __name__ == "__main__":
    main()
