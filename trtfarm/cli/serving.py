"""``triton``: a Triton model repository from a model's released plans."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    TARGETS_OPT,
    app,
    err,
    fail,
    message_text,
    out,
    output_path,
    print_json,
    store_uri,
    targets_path,
)


@app.command()
def triton(
    model: str = typer.Argument(..., help="model name (as released)"),
    repo: Path = typer.Option(..., "--repo", help="the model repository folder to write (Triton's --model-repository)"),
    gpu: list[str] = typer.Option([], "--gpu", help="fleet GPU key (repeat); default: every fleet GPU with a release"),
    toolchain: str = typer.Option(None, "--toolchain", help="e.g. tensorrt-11.4.0.106, where a GPU has releases "
                                  "with several"),
    keep: int = typer.Option(2, "--keep", min=0, help="older versions kept beside the newest"),
    instances: int = typer.Option(None, "--instances", min=1, help="instances per profile [default: from the "
                                  "engine check's context memory, else 1]"),
    dynamic_batching: bool = typer.Option(False, "--dynamic-batching", help="make the first dim Triton's batch dim "
                                          "(max_batch_size > 0) and add dynamic_batching"),
    profiles: Path = typer.Option(None, "--profiles", exists=True, dir_okay=False,
                                  help="the profiles file `trtfarm profiles derive` wrote: its "
                                  "traffic buckets give the preferred batch sizes"),
    channel: str = typer.Option("stable", "--channel", help="stable, or candidate (a canary's repository; a "
                                "model without promotion: serves stable there)"),
    instance_groups: str = typer.Option(None, "--instance-groups", help="per-profile (one group per profile) or "
                                        "shared (each instance serves every profile) [default: per-profile for "
                                        "TensorRT plans, shared for TensorRT-RTX ones]"),
    targets_file: Path = TARGETS_OPT,
    store: str = STORE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Write a Triton model repository (config.pbtxt checked with Triton's schema) from MODEL's released plans."""
    from trtfarm.cli.names import check_channel, check_models
    from trtfarm.extras import require
    from trtfarm.profiles.profile import load_profiles_file
    from trtfarm.project.fleet_file import load_fleet, signing_settings
    from trtfarm.serving.triton import TritonRequest, triton_repositories
    from trtfarm.signing.accepted import AcceptedReleases, configured_max_age
    from trtfarm.store import open_store

    output_path(repo, "--repo")
    check_channel(channel)
    if instance_groups not in (None, "per-profile", "shared"):
        raise fail(f"--instance-groups {instance_groups!r}: use per-profile or shared", 2)
    require("tritonclient")  # a base install: one line naming the [triton] extra, before the store is read
    trust = signing_settings(targets_path(targets_file), only="trust").trusted_keys()
    accepted, max_age = (AcceptedReleases(), configured_max_age()) if trust else (None, None)
    req = TritonRequest(model, repo, tuple(gpu), toolchain, keep, instances,
                        "dynamic" if dynamic_batching else "explicit",
                        load_profiles_file(profiles) if profiles else None, trust, accepted, max_age, channel,
                        instance_groups)
    opened = open_store(store_uri(store))
    check_models(opened, [model])  # a typo names the nearest model of every channel, before any pointer is read
    result = triton_repositories(opened, load_fleet(targets_path(targets_file)), req)
    if as_json:
        print_json(result.to_json())
        return
    for reason in result.split:
        _note(f"one repository per GPU model: {reason}", indent=0)
    shared = [n for n in result.repositories[0].notes if all(n in r.notes for r in result.repositories)]
    for r in result.repositories:  # a note every repository has is printed once, after them
        out.print(f"wrote {escape(str(r.path))} for {escape(', '.join(r.gpus))} ({r.served_by}): versions "
                  f"{', '.join(map(str, r.versions))}", highlight=False, soft_wrap=not out.is_terminal)
        for note in r.notes:
            if note not in shared:
                _note(note)
    for note in shared + result.notes:
        _note(note)
    if len(result.repositories) == 1:
        config = result.repositories[0].config
        if out.is_terminal and max(map(len, config.splitlines())) > out.width:  # a file's lines are not rewrapped
            out.print(message_text("(config.pbtxt is wider than this terminal: `cat` it to read it)"),
                      highlight=False)
        else:
            out.out(config, highlight=False, end="")
    err.print(escape(result.unverified), style="yellow", highlight=False, soft_wrap=not err.is_terminal)


def _note(text: str, indent: int = 2) -> None:
    """One note under what was written, indented, wrapped by words at the screen's width with its indent kept."""
    import textwrap

    for line in textwrap.wrap(text, max(40, out.width - indent), break_on_hyphens=False, break_long_words=False):
        out.print(" " * indent + message_text(line), highlight=False, soft_wrap=True)
