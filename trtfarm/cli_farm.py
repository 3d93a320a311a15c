"""Farm commands: ``worker``, ``pools sync``, ``models push|ls`` and ``farm run``. Registered on the main app.

Prefect is imported inside the commands that talk to a server, through ``tasks/`` (the core stays Prefect-free).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import typer
from rich.table import Table

from trtfarm.cli import JSON_OPT, STORE_OPT, TARGETS_OPT, _fail, _store_uri, _targets_file, app, err, out
from trtfarm.errors import TrtfarmError

pools_app = typer.Typer(no_args_is_help=True, help="Work pools on the Prefect server: one per GPU model.")
models_app = typer.Typer(no_args_is_help=True, help="The model registry in the store (what nightly runs build).")
farm_app = typer.Typer(no_args_is_help=True, help="Start build-matrix runs on a farm's Prefect server.")
app.add_typer(pools_app, name="pools")
app.add_typer(models_app, name="models")
app.add_typer(farm_app, name="farm")


def project_root() -> Path:
    """The checkout the flows' entrypoints are relative to (``$TRTFARM_HOME``, else where trtfarm is installed from)."""
    return Path(os.environ.get("TRTFARM_HOME") or Path(__file__).resolve().parent.parent)


@app.command()
def worker(pool: str = typer.Option(..., "--pool", help="the work pool to serve (one per GPU model)"),
           queue: str = typer.Option(None, "--queue", help="serve only this toolchain's queue of the pool, e.g. "
                                     "tensorrt-11.4.0.106 (a worker image carries one TensorRT version)"),
           check_only: bool = typer.Option(False, "--check-only", help="check this machine against POOL, then exit"),
           name: str = typer.Option(None, "--name", help="worker name"),
           healthcheck: bool = typer.Option(False, "--healthcheck", help="serve Prefect's worker health endpoint "
                                            "(http://127.0.0.1:8080/health) for container health checks"),
           targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Check the local GPU and toolchains against POOL's targets; only then start a Prefect worker on it."""
    from trtfarm.fleet import load_fleet
    from trtfarm.matrix import local_capabilities
    from trtfarm.workers import check_worker

    try:
        caps = local_capabilities()
        result = check_worker(load_fleet(_targets_file(targets_file)), pool, caps.gpus, caps.versions, queue)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps({"pool": pool, "queue": queue, "ok": result.ok, "found": result.found, "needs": result.needs,
                          "targets": result.targets, "problems": result.problems}, indent=2))
    else:
        out.print(f"pool {pool}: needs {result.needs}\nthis machine: {result.found}", highlight=False)
    if not result.ok:
        raise _fail("refusing to serve pool {!r}:\n  - {}".format(pool, "\n  - ".join(result.problems)), code=3)
    if check_only:
        return
    argv = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process",
            "--no-create-pool-if-not-found", *(["--name", name] if name else []),
            *(["--work-queue", queue] if queue else []),
            *(["--with-healthcheck"] if healthcheck else [])]
    env = {**os.environ, "PREFECT_WORKER_QUERY_SECONDS": os.environ.get("PREFECT_WORKER_QUERY_SECONDS", "1"),
           "TRTFARM_HOME": str(project_root()), "TRTFARM_TARGETS": str(Path(_targets_file(targets_file)).resolve())}
    os.execve(argv[0], argv, env)  # the checked process becomes the worker (signals go straight to Prefect)


@pools_app.command("sync")
def pools_sync(targets_file: Path = TARGETS_OPT,
               check: bool = typer.Option(False, "--check", help="only report drift; exit 1 when there is some"),
               worker_type: str = typer.Option("process", "--type", help="worker type of new pools (process, "
                                               "docker, kubernetes)"),
               control_limit: int = typer.Option(2, "--control-limit", min=1, help="concurrent build-matrix runs"),
               prefect_file: Path = typer.Option(Path("prefect.yaml"), "--prefect-file",
                                                 help="deployments to check against the pools"),
               as_json: bool = JSON_OPT) -> None:
    """Create or update one work pool per GPU model (limit = its GPU count) and the control pool; report drift."""
    from trtfarm.fleet import load_fleet
    from trtfarm.pools import deployment_drift, desired_pools

    try:
        fleet = load_fleet(_targets_file(targets_file))
        desired = desired_pools(fleet, worker_type, control_limit)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    missing = deployment_drift(prefect_file, desired) if prefect_file.is_file() else []
    from tasks.pools import sync_work_pools

    templates = {}
    if worker_type == "kubernetes":
        from trtfarm.k8s import job_template

        templates = {p.name: job_template(p.name, fleet) for p in desired if p.gpus}
    try:
        drift = asyncio.run(sync_work_pools(desired, apply=not check, templates=templates))
    except Exception as e:  # httpx.ConnectError and friends: the server is the problem, say which one
        api = os.environ.get("PREFECT_API_URL") or "(no PREFECT_API_URL: an ephemeral server)"
        raise _fail(f"cannot sync pools with the Prefect server at {api}: {type(e).__name__}: {e}") from e
    if as_json:
        print(json.dumps([{"pool": d.pool, "declared": d.declared, "on_server": d.on_server, "action": d.action}
                          for d in drift], indent=2))
    else:
        table = Table("pool", "declared", "on server", "check" if check else "action")
        for d in drift:
            table.add_row(d.pool, d.declared, d.on_server, ("[yellow]" if d.changes else "") + d.action)
        out.print(table)
    for problem in missing:
        err.print(f"[yellow]drift:[/] {problem}", highlight=False, soft_wrap=True)
    if check and (missing or any(d.changes for d in drift)):
        raise typer.Exit(1)


@pools_app.command("k8s")
def pools_k8s(out_dir: Path = typer.Option(Path("infra/k8s"), "--out", help="where to write the files"),
              api_url: str = typer.Option("http://prefect-server.prefect.svc.cluster.local:4200/api", "--api-url",
                                          help="the Prefect API as the workers in the cluster reach it"),
              targets_file: Path = TARGETS_OPT) -> None:
    """Write each GPU pool's Kubernetes base job template and prefect-worker Helm values (for GitOps)."""
    import yaml

    from trtfarm.fleet import load_fleet
    from trtfarm.k8s import job_template, worker_values
    from trtfarm.pools import desired_pools

    try:
        fleet = load_fleet(_targets_file(targets_file))
    except TrtfarmError as e:
        raise _fail(str(e)) from e
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
        out.print(f"wrote {pool.name}", highlight=False)


@models_app.command("push")
def models_push(folder: Path = typer.Argument(..., help="export folder: model.onnx + farm.yaml [+ calib.npz, "
                                              "heldout.npz, shapes.jsonl]"),
                name: str = typer.Option(None, "--name", help="model name (default: farm.yaml's, else the folder)"),
                store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Register a model export in the store; the next nightly run builds it."""
    from trtfarm.registry import register_export
    from trtfarm.store import open_store

    try:
        ref = register_export(open_store(_store_uri(store)), folder, name)
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    if as_json:
        print(json.dumps(ref.to_json()))
    else:
        out.print(f"registered {ref.name} export {ref.export_id}: {ref.uri}", highlight=False, soft_wrap=True)


@models_app.command("ls")
def models_ls(store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Every registered model and its latest export."""
    from trtfarm.registry import latest_exports
    from trtfarm.store import open_store

    refs = latest_exports(open_store(_store_uri(store)))
    if as_json:
        print(json.dumps([r.to_json() for r in refs], indent=2))
        return
    table = Table("model", "latest export", "uri")
    for r in refs:
        table.add_row(r.name, r.export_id or "", r.uri)
    out.print(table)


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
             deployment: str = typer.Option("build-matrix/build-matrix", "--deployment"),
             store: str = STORE_OPT, targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Start a build-matrix run on the farm (as the Prefect UI does); bad parameters are refused before it starts."""
    from flows.requests import MatrixRequest
    from tasks.submit import submit_matrix

    try:
        given = {"model": model, "targets": target, "precision": precision, "force": force or None,
                 "refit": refit or None, "wait_for_workers": wait_for_workers or None, "store": store,
                 "targets_file": str(targets_file) if targets_file else None, "child_timeout_s": child_timeout}
        request = MatrixRequest(**{k: v for k, v in given.items() if v not in (None, [])})
        request.check_targets()
        run_id, state, message, rows = asyncio.run(submit_matrix(deployment, request, wait))
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    except ValueError as e:  # pydantic: an unknown precision and the like
        raise _fail(f"invalid parameters: {e}") from e
    if as_json:
        print(json.dumps({"flow_run_id": run_id, "state": state, "message": message, "outcomes": rows}, indent=2))
    else:
        out.print(f"build-matrix run {run_id}: {state}" + (f" ({message})" if message else ""), highlight=False,
                  soft_wrap=True)
        if rows:
            table = Table("model", "target", "status", "build s", "reason")
            colours = {"built": "green", "up-to-date": "cyan", "skipped": "yellow", "failed": "red"}
            for r in rows:
                table.add_row(r["model"], r["target"], f"[{colours.get(r['status'], 'white')}]{r['status']}[/]",
                              f"{r['build_s']:.2f}" if r.get("build_s") is not None else "–", r["reason"])
            out.print(table)
    if wait and state != "COMPLETED":
        raise typer.Exit(1)


images_app = typer.Typer(no_args_is_help=True, help="Worker images: one per toolchain version in gpu_targets.yaml.")
app.add_typer(images_app, name="images")


@images_app.command("build")
def images_build(toolchain: list[str] = typer.Option([], "--toolchain", help="toolchain key (repeatable; default: "
                                                     "every toolchain with an image)"),
                 push: bool = typer.Option(False, "--push", help="push each image that passed its probe"),
                 context: Path = typer.Option(None, "--context", help="build context [default: the trtfarm checkout]"),
                 dockerfile: str = typer.Option(None, "--dockerfile", help="Dockerfile inside the context [default: "
                                                "infra/docker/Dockerfile, or Dockerfile.rtx for TensorRT-RTX]"),
                 build_network: str = typer.Option(None, "--build-network", help="network for RUN steps (e.g. none)"),
                 targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Build each worker image, run it to check its toolchain version, and tag only the truthful ones."""
    from trtfarm.fleet import load_fleet
    from trtfarm.images import build_image, docker_client, image_jobs, push_image

    try:
        jobs = image_jobs(load_fleet(_targets_file(targets_file)), toolchain or None, dockerfile)
        client = docker_client()
    except TrtfarmError as e:
        raise _fail(str(e)) from e
    results = []
    for job in jobs:
        if not as_json:
            out.print(f"building {job.tag} ({job.flavour} {job.version} on {job.base_image or 'default base'})",
                      highlight=False)
        log = (lambda line: None) if as_json else (lambda line: out.print(f"  [dim]{line}[/]", highlight=False))
        result = build_image(client, job, context or project_root(), log, build_network)
        if push and result.status == "tagged":
            push_image(client, result)
        results.append(result)
    if as_json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        table = Table("toolchain", "tag", "status", "detail")
        for r in results:
            colour = "green" if r.status == "tagged" else "red"
            table.add_row(r.toolchain, r.tag, f"[{colour}]{r.status}[/]", r.detail)
        out.print(table)
    if any(r.status != "tagged" or (push and not r.pushed) for r in results):
        raise typer.Exit(1)


webhook_app = typer.Typer(no_args_is_help=True, help="Start builds from new model exports (S3 via SNS, or signed "
                                                      "JSON posts).")
app.add_typer(webhook_app, name="webhook")


@webhook_app.command("serve")
def webhook_serve(host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8088, "--port"),
                  topic: list[str] = typer.Option([], "--topic", help="SNS topic ARN to accept (repeatable; "
                                                  "others get 403)"),
                  secret_env: str = typer.Option("TRTFARM_WEBHOOK_SECRET", "--secret-env",
                                                 help="environment variable holding the HMAC secret for /hook"),
                  replay_window: int = typer.Option(300, "--replay-window", min=1, help="seconds a signed post "
                                                    "stays valid"),
                  max_body: int = typer.Option(1 << 20, "--max-body", min=1024, help="largest body in bytes (413)"),
                  sns_verify: bool = typer.Option(True, "--sns-verify/--no-sns-verify",
                                                  help="check SNS message signatures (keep on outside tests)"),
                  store: str = STORE_OPT) -> None:
    """Serve POST /sns (S3 notifications through SNS) and POST /hook (HMAC-signed {"model_uri": ...})."""
    from trtfarm.webhook_app import WebhookConfig, serve

    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise _fail("PREFECT_API_URL is not set: the receiver posts trtfarm.model.exported events to the farm's "
                    "Prefect server (e.g. http://127.0.0.1:4200/api)")
    secret = os.environ.get(secret_env)
    if not secret and not topic:
        raise _fail(f"nothing to accept: set {secret_env} for signed posts and/or give --topic ARN for SNS")
    serve(WebhookConfig(_store_uri(store), api, secret, set(topic), replay_window, max_body, sns_verify), host, port)
