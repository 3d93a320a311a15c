"""Farm commands that talk to a Prefect server: ``pools``, ``farm run`` and ``farm deploy``.

``trtfarm worker``, run on each GPU machine, is ``worker_commands.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from trtfarm.cli.common import (
    JSON_OPT,
    SERVER_WAIT_OPT,
    STORE_OPT,
    TARGETS_OPT,
    app,
    err,
    fail,
    message_text,
    need_server,
    out,
    output_path,
    print_json,
    project_root,
    store_uri,
    targets_path,
)
from trtfarm.errors import TrtfarmError, first_line

pools_app = typer.Typer(no_args_is_help=True, help="Work pools on the Prefect server: one per GPU model.")
farm_app = typer.Typer(no_args_is_help=True, help="Start build-matrix runs on a farm's Prefect server.")
app.add_typer(pools_app, name="pools")
app.add_typer(farm_app, name="farm")


@pools_app.command("sync")
def pools_sync(targets_file: Path = TARGETS_OPT,
               check: bool = typer.Option(False, "--check", help="only report drift; exit 1 when there is some"),
               worker_type: str = typer.Option("process", "--type", help="worker type of new pools (process, "
                                               "docker, kubernetes)"),
               control_limit: int = typer.Option(2, "--control-limit", min=1, help="concurrent build-matrix runs"),
               prefect_file: Path = typer.Option(None, "--prefect-file", exists=True, dir_okay=False,
                                                 help="deployments to check against the pools \\[default: "
                                                 "./prefect.yaml when there is one]"),
               as_json: bool = JSON_OPT, server_wait: int = SERVER_WAIT_OPT) -> None:
    """Create or update one work pool per GPU model (limit = its GPU count) and the control pool; report drift."""
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.workers.pools import deployment_drift, desired_pools

    fleet = load_fleet(targets_path(targets_file))
    desired = desired_pools(fleet, worker_type, control_limit)
    deployments = prefect_file or Path("prefect.yaml")
    missing = deployment_drift(deployments, desired) if deployments.is_file() else []
    need_server(server_wait)

    templates = {}
    if worker_type == "kubernetes":
        from trtfarm.workers.k8s import job_template

        templates = {p.name: job_template(p.name, fleet) for p in desired if p.gpus}
    import asyncio

    from flows.client import sync_work_pools

    drift = asyncio.run(sync_work_pools(desired, apply=not check, templates=templates))
    if as_json:
        print_json([{"pool": d.pool, "declared": d.declared, "on_server": d.on_server, "action": d.action}
                    for d in drift])
    else:
        table = Table("pool", "declared", "on server", "check" if check else "action")
        for d in drift:
            table.add_row(message_text(d.pool), message_text(d.declared), message_text(d.on_server),
                          ("[yellow]" if d.changes else "") + message_text(d.action))
        out.print(table)
    for problem in missing:
        err.print(f"[yellow]drift:[/] {message_text(problem)}", highlight=False, soft_wrap=not err.is_terminal)
    if check and (missing or any(d.changes for d in drift)):
        raise typer.Exit(1)


@pools_app.command("k8s")
def pools_k8s(out_dir: Path = typer.Option(Path("infra/k8s"), "--out", help="where to write the files"),
              api_url: str = typer.Option("http://prefect-server.prefect.svc.cluster.local:4200/api", "--api-url",
                                          help="the Prefect API as the workers in the cluster reach it"),
              targets_file: Path = TARGETS_OPT) -> None:
    """Write each GPU pool's Kubernetes base job template and prefect-worker Helm values (for GitOps)."""
    import yaml

    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.workers.k8s import job_template, worker_values
    from trtfarm.workers.pools import desired_pools

    output_path(out_dir, "--out")
    fleet = load_fleet(targets_path(targets_file))
    out_dir.mkdir(parents=True, exist_ok=True)
    for pool in desired_pools(fleet, "kubernetes"):
        if pool.gpus:
            (out_dir / f"job-template-{pool.name}.json").write_text(json.dumps(job_template(pool.name, fleet),
                                                                               indent=2) + "\n")
        template = f" --set-file worker.config.baseJobTemplate.configuration={out_dir}/job-template-{pool.name}.json" \
            if pool.gpus else ""
        values = (f"# helm install trtfarm-{pool.name} prefect/prefect-worker --namespace trtfarm "
                  f"-f {out_dir}/values-{pool.name}.yaml{template}\n")
        (out_dir / f"values-{pool.name}.yaml").write_text(values + yaml.safe_dump(worker_values(pool.name, api_url),
                                                                                   sort_keys=False))
        out.print(message_text(f"wrote {pool.name}"), highlight=False)


@farm_app.command("run")
def farm_run(model: str = typer.Argument(None, help="registered model, name@export_id or export URI (default: "
                                         "every registered model)"),
             target: list[str] = typer.Option([], "--target", help="target id (repeatable; default: all)"),
             precision: str = typer.Option(None, "--precision", help="fp32 | fp16 | bf16 | int8 | fp8"),
             force: bool = typer.Option(False, "--force", help="rebuild published targets"),
             refit: bool = typer.Option(False, "--refit", help="refit released refittable plans with the new "
                                        "weights instead of rebuilding them"),
             wait: bool = typer.Option(False, "--wait", help="wait for the run and print its outcomes"),
             wait_for_workers: bool = typer.Option(False, "--wait-for-workers", help="queue builds for pools with "
                                                   "no online worker instead of skipping them"),
             child_timeout: int = typer.Option(None, "--child-timeout", min=10,
                                               help="cancel a child build that runs longer (seconds)"),
             child_pending_limit: int = typer.Option(None, "--child-pending-limit", min=10,
                                                     help="crash and resubmit a child left Pending longer (seconds) "
                                                     "by a worker that is gone [default: 120]"),
             deployment: str = typer.Option("build-matrix/build-matrix", "--deployment"),
             dry_run: bool = typer.Option(False, "--dry-run", help="say what the run would build, keep and skip "
                                          "(from the store, with estimates); start nothing"),
             store: str = STORE_OPT, targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT,
             server_wait: int = SERVER_WAIT_OPT) -> None:
    """Start a build-matrix run on the farm (as the Prefect UI does); bad parameters are refused before it starts.

    With --dry-run nothing starts and no server is needed: the run's own planner decides, from the store.
    """
    from trtfarm.planning.requests import MatrixRequest

    if store:
        store_uri(store)  # a local store that is not there is named now, not by the run
    try:
        given = {"model": model, "targets": target, "precision": precision, "force": force or None,
                 "refit": refit or None, "wait_for_workers": wait_for_workers or None, "store": store,
                 "targets_file": str(targets_file) if targets_file else None, "child_timeout_s": child_timeout,
                 "child_pending_limit_s": child_pending_limit}
        request = MatrixRequest(**{k: v for k, v in given.items() if v not in (None, [])})
        fleet, targets = request.check_targets()  # once: the up-to-date check below uses them too
    except ValueError as e:  # pydantic: an unknown precision and the like
        problems = [f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()] if hasattr(e, "errors") else []
        raise fail(f"invalid parameters: {'; '.join(problems) or first_line(e)}") from e
    if dry_run:
        _check_model(request)
        _dry_run(request, as_json, fleet, targets)
        return
    rows = None if force or refit else _published_already(request, fleet, targets)
    if rows is not None:  # nothing to build: answer from the store, start no run, wait on no worker
        from flows.client import MatrixRun

        _print_run(MatrixRun(None, "COMPLETED", "every target is published already: no run started", rows), as_json)
        return
    need_server(server_wait)
    _check_model(request)  # once the server answers (no server: exit 3 first, as every farm command), before the run
    import asyncio

    from flows.client import submit_matrix

    run = asyncio.run(submit_matrix(deployment, request, wait))
    _print_run(run, as_json)
    if wait and run.state != "COMPLETED":
        raise typer.Exit(1)


def _check_model(request) -> None:
    """Refuse a model the run's store has no registered export of (exit 2, the nearest name) before any run exists.

    The run reads the store this shell names (``--store`` / ``$TRTFARM_STORE`` travels in its request), so the name
    is checked there; a store this shell cannot reach (an S3 endpoint only the workers see) leaves it to the run.
    """
    from trtfarm.cli.names import check_registered
    from trtfarm.errors import StoreError
    from trtfarm.store import open_store

    try:
        check_registered(open_store(request.store), request.model)
    except StoreError as e:  # unreachable, no credentials here: the workers may reach it
        err.print(message_text(f"note: model {request.model!r} not checked here: {first_line(e)}; the run checks it"),
                  highlight=False, soft_wrap=True)


def _dry_run(request, as_json: bool, fleet, targets) -> None:
    """What the run would do, decided by the planner the run uses (``planning/dry_run.py``): nothing starts.

    The what-if (``state.views.dry_run``) adds to each decision what changed and an estimate.
    """
    from trtfarm.cli.fleet_commands import print_decisions
    from trtfarm.planning.dry_run import planned_decisions
    from trtfarm.run_setup import find_exports
    from trtfarm.state.views import dry_run
    from trtfarm.store import open_store

    if request.refit:
        raise fail("--dry-run with --refit: a dry run does not decide refits (they depend on each released plan's "
                   "refit flags); drop --refit to see what a full run would build")
    store = open_store(request.store)
    exports = find_exports(store, request.model)
    decided, refused, view = planned_decisions(request, store, exports, fleet, targets)
    decisions = dry_run(store, fleet, exports, decided, refused, targets=request.targets,
                        precision=request.precision, force=request.force, survey=view.survey)
    if as_json:
        print_json([d.to_json() for d in decisions.decisions])
    else:
        print_decisions(decisions, "farm run --dry-run (nothing started)")


def _published_already(request, fleet, targets) -> list | None:
    """Every target's ``RunRow`` when the planner finds all of them up to date, else None (the run is started).

    Up to date is the planner's own answer from the store's one read model (``state/run_view.py``): each target's
    cell is released and names the build the run would build; a release a killed run left undone, a damaged or
    refused cell, is the run's to repair. Asks the store this shell names (``--store`` / ``$TRTFARM_STORE``, which
    ``--wait`` needs to be the farm's).
    """
    from trtfarm.executor import rows_for
    from trtfarm.planning.plan import up_to_date_export
    from trtfarm.run_setup import find_exports
    from trtfarm.state.run_view import RunView
    from trtfarm.store import open_store

    try:  # read only: a release a killed run left undone is the run's to carry out
        store = open_store(request.store)
        exports = find_exports(store, request.model)
        view = RunView(store, fleet, targets, whole_store=True) if len(exports) > 1 else None  # as the run plans them
        checks = (up_to_date_export(request, e, store, fleet, view, targets) for e in exports)  # lazily, in order:
        plans = list(iter(lambda: next(checks, None), None))  # the first model with work ends it (the run plans it)
        if not exports or len(plans) != len(exports):
            return None
    except TrtfarmError:  # this shell's store is not the farm's (or cannot say): let the farm decide
        return None
    return rows_for(plans, [])


def _print_run(run, as_json: bool) -> None:
    """A ``MatrixRun`` (``flows.client``): its state, one row per target, the children lost to their hosts."""
    if as_json:
        print_json(run.to_json())
        return
    name = f"build-matrix run {run.flow_run_id}" if run.flow_run_id else "build-matrix"
    out.print(message_text(f"{name}: {run.state}" + (f" ({run.message})" if run.message else "")), highlight=False,
              soft_wrap=not out.is_terminal)
    if run.rows:
        from trtfarm.cli.tables import Column, fitted_table

        colours = {"built": "green", "up-to-date": "cyan", "skipped": "yellow", "failed": "red"}
        outcomes = [(r.model, r.outcome) for r in run.rows]
        cells = [{"model": escape(m), "target": escape(o.target),
                  "status": f"[{colours.get(o.status, 'white')}]{o.status}[/]",
                  "build s": f"{o.build_s:.2f}" if o.build_s is not None else "–",
                  "reason": message_text(o.reason)} for m, o in outcomes]
        table, dropped = fitted_table(out, [Column("model", 3), Column("target"), Column("status"),
                                            Column("build s", 2, "right"), Column("reason", 1)], cells)
        out.print(table)
        if "reason" in dropped:  # under the table, wrapped by words
            for _, o in outcomes:
                if o.reason:
                    out.print(message_text(f"  {o.target}: {o.reason}"), highlight=False)
    if run.lost:
        out.print(message_text(f"{len(run.lost)} child run(s) lost to their host and resubmitted:"), highlight=False)
    for r in run.lost:
        where = f"worker {r.worker} (pool {r.pool})" if r.worker else f"pool {r.pool}"
        then = f"resubmitted as {r.resubmitted_as} to pool {r.to_pool}: " if r.resubmitted_as else ""
        out.print(message_text(f"  {r.lost} on {where}: {r.why}; {then}{r.outcome}"), highlight=False,
                  soft_wrap=False)


@farm_app.command("deploy")
def farm_deploy(prefect_file: Path = typer.Option(None, "--prefect-file", exists=True, dir_okay=False,
                                                  help="the deployments \\[default: "
                                                  "./prefect.yaml, else the one trtfarm ships]"),
                targets_file: Path = TARGETS_OPT, server_wait: int = SERVER_WAIT_OPT, as_json: bool = JSON_OPT) -> None:
    """Deploy prefect.yaml's deployments (prefect deploy --all, from trtfarm's flows) and say what was deployed."""
    import subprocess

    import yaml

    fleet = targets_path(targets_file)
    api = need_server(server_wait)
    path = prefect_file or Path("prefect.yaml")
    if not path.is_file():
        from importlib import resources

        path = Path(str(resources.files("trtfarm").joinpath("templates", "prefect.yaml")))
    deployments = (yaml.safe_load(path.read_text()) or {}).get("deployments") or []
    env = {**os.environ, "PREFECT_API_URL": api}
    if Path(fleet).is_file():  # the parameter form offers the fleet's target ids
        env["TRTFARM_TARGETS"] = str(Path(fleet).resolve())
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all", "--prefect-file", str(path.resolve())]
    proc = subprocess.run(cmd, cwd=project_root(), env=env, capture_output=True, text=True)  # entrypoints: flows/
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        err.print(message_text(tail), highlight=False)
        raise fail(f"prefect deploy failed (exit {proc.returncode}); its last lines are above", code=1)
    rows = [{"deployment": f"{d.get('entrypoint', '').rsplit(':', 1)[-1].replace('_', '-')}/{d['name']}",
             "pool": (d.get("work_pool") or {}).get("name")} for d in deployments]
    import asyncio

    from flows.client import sync_lost_host_automation
    from flows.heartbeats import AUTOMATION, LOST_AFTER_S

    automation = asyncio.run(sync_lost_host_automation())
    if as_json:
        print_json({"prefect_file": str(path), "api": api, "deployments": rows,
                    "automation": {"name": AUTOMATION, "action": automation}})
        return
    by_pool: dict[str, list[str]] = {}
    for r in rows:
        by_pool.setdefault(r["pool"] or "-", []).append(r["deployment"])
    out.print(message_text(f"deployed {len(rows)} deployments from {path} to {api}:"), highlight=False)
    for pool, names in by_pool.items():
        out.print(message_text(f"  pool {pool}: {', '.join(names)}"), highlight=False)
    out.print(message_text(f"automation {AUTOMATION!r} {automation}: a run silent for {LOST_AFTER_S} s is crashed "
                           "and its build resubmitted"), highlight=False)
    out.print(message_text("Start each pool's workers with `trtfarm worker --pool POOL` (it checks the machine "
                           "first)."), highlight=False)
