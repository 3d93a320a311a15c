"""``images build``: one worker image per toolchain version in gpu_targets.yaml."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from trtfarm.cli.common import JSON_OPT, TARGETS_OPT, app, message_text, out, print_json, project_root, targets_path

images_app = typer.Typer(no_args_is_help=True, help="Worker images: one per toolchain version in gpu_targets.yaml.")
app.add_typer(images_app, name="images")


@images_app.command("build")
def images_build(toolchain: list[str] = typer.Option([], "--toolchain", help="toolchain key (repeatable; default: "
                                                     "every toolchain with an image)"),
                 push: bool = typer.Option(False, "--push", help="push each image that passed its probe"),
                 context: Path = typer.Option(None, "--context", exists=True, file_okay=False,
                                              help="build context [default: the trtfarm checkout]"),
                 dockerfile: str = typer.Option(None, "--dockerfile", help="Dockerfile inside the context [default: "
                                                "infra/docker/Dockerfile, or Dockerfile.rtx for TensorRT-RTX]"),
                 build_network: str = typer.Option(None, "--build-network", help="network for RUN steps (e.g. none)"),
                 targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Build each worker image, run it to check its toolchain version, and tag only the truthful ones."""
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.workers.images import build_image, docker_client, image_jobs, push_image

    jobs = image_jobs(load_fleet(targets_path(targets_file)), toolchain or None, dockerfile)
    client = docker_client()
    results = []
    for job in jobs:
        if not as_json:
            base = job.base_image or "default base"
            out.print(message_text(f"building {job.tag} ({job.flavour} {job.version} on {base})"), highlight=False)
        log = (lambda line: None) if as_json else (
            lambda line: out.print(f"  [dim]{message_text(line)}[/]", highlight=False))
        result = build_image(client, job, context or project_root(), log, build_network)
        if push and result.status == "tagged":
            push_image(client, result)
        results.append(result)
    if as_json:
        print_json([r.to_json() for r in results])
    else:
        table = Table("toolchain", "tag", "status", "detail")
        for r in results:
            colour = "green" if r.status == "tagged" else "red"
            table.add_row(message_text(r.toolchain), message_text(r.tag), f"[{colour}]{r.status}[/]",
                          message_text(r.detail))
        out.print(table)
    if any(r.status != "tagged" or (push and not r.pushed) for r in results):
        raise typer.Exit(1)


