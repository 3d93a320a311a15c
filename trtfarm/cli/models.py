"""``models push|ls``: the model registry in the store (what nightly runs build)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    app,
    message_text,
    note_new_store,
    out,
    print_json,
    store_is_empty,
    store_uri,
)

models_app = typer.Typer(no_args_is_help=True, help="The model registry in the store (what nightly runs build).")
app.add_typer(models_app, name="models")


@models_app.command("push")
def models_push(folder: Path = typer.Argument(..., exists=True, file_okay=False,
                                              help="export folder: model.onnx + farm.yaml [+ calib.npz, "
                                              "heldout.npz, shapes.jsonl]"),
                name: str = typer.Option(None, "--name", help="model name (default: farm.yaml's, else the folder)"),
                store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Register a model export in the store; the next nightly run builds it."""
    from trtfarm.publishing.registry import register_export
    from trtfarm.store import open_store

    uri = store_uri(store, creates=True)
    was_empty = store_is_empty(uri)
    ref = register_export(open_store(uri), folder, name)
    note_new_store(uri, was_empty)
    if as_json:
        print_json(ref.to_json(), indent=None)
    else:
        out.print(message_text(f"registered {ref.name} export {ref.export_id}: {ref.uri}"), highlight=False,
                  soft_wrap=not out.is_terminal)


@models_app.command("ls")
def models_ls(store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Every registered model and its latest export."""
    from trtfarm.publishing.registry import latest_exports
    from trtfarm.store import open_store

    refs = latest_exports(open_store(store_uri(store)))
    if as_json:
        print_json([r.to_json() for r in refs])
        return
    table = Table("model", "latest export", "uri")
    for r in refs:
        table.add_row(message_text(r.name), message_text(r.export_id or ""), message_text(r.uri))
    out.print(table)


