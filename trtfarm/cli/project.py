"""``init``: the files a project edits (the fleet, a build spec, the farm's deployments), from the installed package.

The fleet gets this machine's GPUs and toolchains under the names its built-in fleet uses, and farm.yaml fits the
model in the folder (project/init_files.py). A file that is there is kept, so ``init`` can run again.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import typer

from trtfarm.cli.common import app, fail, message_text, out, output_path

# what `trtfarm init` writes: (template in trtfarm/templates, file under DIR, executable)
TEMPLATES = (("gpu_targets.yaml", "gpu_targets.yaml", False), ("farm.yaml", "farm.yaml", False),
             ("prefect.yaml", "prefect.yaml", False), ("local-farm/postgres.sh", "local-farm/postgres.sh", True))


def template_text(name: str) -> str:
    """One template as the wheel carries it."""
    return resources.files("trtfarm").joinpath("templates", *name.split("/")).read_text(encoding="utf-8")


def project_model(folder: Path) -> Path | None:
    """The export farm.yaml is for: the folder's one ``.onnx`` (``model.onnx`` among several), else None."""
    found = sorted(p for p in folder.glob("*.onnx") if p.is_file())
    named = [p for p in found if p.name == "model.onnx"]
    return named[0] if named else found[0] if len(found) == 1 else None


def fitted_text(name: str, folder: Path) -> str:
    """What ``init`` writes for one template: the fleet with this machine's GPUs, farm.yaml fitted to the model."""
    from trtfarm.project.builtin_fleet import template_fleet, this_machine_fleet
    from trtfarm.project.init_files import farm_yaml, fleet_yaml

    text = template_text(name)
    if name == "gpu_targets.yaml":
        return fleet_yaml(text, template_fleet(), this_machine_fleet())
    if name == "farm.yaml":
        return farm_yaml(text, project_model(folder))
    return text


def _write(path: Path, text: str, executable: bool) -> None:
    """Write one file (its folder made first); a folder that refuses it is one line, exit 1."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if executable:
            path.chmod(0o755)
    except OSError as err:
        raise fail(f"cannot write {path}: {err.strerror or err}; choose a folder you can write to, or fix its "
                   "permissions", code=1) from err


@app.command()
def init(folder: Path = typer.Argument(Path("."), help="where to write them"),
         force: bool = typer.Option(False, "--force", help="overwrite files that are already there")) -> None:
    """Write gpu_targets.yaml, a farm.yaml template, prefect.yaml and local-farm/postgres.sh to edit.

    A file that is already there is kept (and named) unless ``--force``, so running it again changes nothing.
    """
    output_path(folder, "")
    paths = [(name, folder / dest, mode) for name, dest, mode in TEMPLATES]
    kept = [p for _, p, _ in paths if p.exists() and not force]
    for name, path, executable in paths:
        if path in kept:
            out.print(message_text(f"kept {path} (already there; --force overwrites)"), highlight=False)
            continue
        _write(path, fitted_text(name, folder), executable)
        out.print(message_text(f"wrote {path}"), highlight=False)
    if len(kept) == len(paths):
        out.print("every file is already there: nothing written", highlight=False)
        return
    out.print(message_text(next_step(folder, force or folder / "farm.yaml" not in kept)), highlight=False)


def next_step(folder: Path, wrote_farm: bool) -> str:
    """What to do after ``init``: a farm.yaml written beside the folder's model says so; else where it goes."""
    model = project_model(folder)
    if model is None:
        return ("Next: edit gpu_targets.yaml (`trtfarm targets` shows it), put farm.yaml next to your model.onnx, "
                "then `trtfarm build model.onnx`.")
    build = model if folder != Path(".") else Path(model.name)
    farm = f"farm.yaml (already beside {model.name}, fitted to it)" if wrote_farm else "farm.yaml"
    return f"Next: edit gpu_targets.yaml (`trtfarm targets` shows it) and {farm}, then `trtfarm build {build}`."
