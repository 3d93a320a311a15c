"""``init``: the files a project edits (the fleet, a build spec, the farm's deployments), from the installed package."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import typer

from trtfarm.cli.common import app, fail, message_text, out

# what `trtfarm init` writes: (template in trtfarm/templates, file under DIR, executable)
TEMPLATES = (("gpu_targets.yaml", "gpu_targets.yaml", False), ("farm.yaml", "farm.yaml", False),
             ("prefect.yaml", "prefect.yaml", False), ("local-farm/postgres.sh", "local-farm/postgres.sh", True))


def template_text(name: str) -> str:
    """One template as the wheel carries it."""
    return resources.files("trtfarm").joinpath("templates", *name.split("/")).read_text(encoding="utf-8")


@app.command()
def init(folder: Path = typer.Argument(Path("."), help="where to write them"),
         force: bool = typer.Option(False, "--force", help="overwrite files that are already there")) -> None:
    """Write gpu_targets.yaml, a farm.yaml template, prefect.yaml and local-farm/postgres.sh to edit.

    A file that is already there is kept (and named) unless ``--force``; with nothing left to write it exits 2.
    """
    paths = [(name, folder / dest, mode) for name, dest, mode in TEMPLATES]
    kept = [p for _, p, _ in paths if p.exists() and not force]
    if len(kept) == len(paths):
        raise fail(f"{', '.join(map(str, kept))}: already there; nothing written (--force overwrites)")
    for name, path, executable in paths:
        if path in kept:
            out.print(message_text(f"kept {path} (already there; --force overwrites)"), highlight=False)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template_text(name), encoding="utf-8")
        if executable:
            path.chmod(0o755)
        out.print(message_text(f"wrote {path}"), highlight=False)
    out.print(message_text("Next: edit gpu_targets.yaml (`trtfarm targets` shows it), put farm.yaml next to your "
                           "model.onnx, then `trtfarm build model.onnx`."), highlight=False)
