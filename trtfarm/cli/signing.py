"""``sign``: sign the plans and releases a store already holds unsigned."""

from __future__ import annotations

from pathlib import Path

import typer

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    TARGETS_OPT,
    app,
    err,
    fail,
    message_text,
    out,
    print_json,
    store_uri,
    targets_path,
)


@app.command()
def sign(models: list[str] = typer.Argument(None, help="model names [default: every model in the store]"),
         targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Sign the published plans and releases that have no signature, with the worker key (TRTFARM_SIGNING_KEY).

    Each plan is re-hashed against its manifest first; one that does not match, is missing, or whose manifest sits
    in another model's folder, is refused and listed, never signed, while every sound plan and release is signed
    (exit 1 with the count refused). Releases with no signed claim, or one that expires within 10 days, are signed
    again (next version, same plan). A model name the store does not hold is bad input (exit 2).
    """
    from trtfarm.cli.names import check_models
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.publishing.sign_store import sign_store
    from trtfarm.store import open_store

    uri = store_uri(store)  # a store that is not there, then a misspelt model, are named before the key is looked for
    check_models(open_store(uri), models or ())
    signer = signing_settings(targets_path(targets_file, note=False), only="key").signer()
    if signer is None:
        raise fail("no signing key: set TRTFARM_SIGNING_KEY=PATH (the workers' PEM key) or signing.key in "
                   "gpu_targets.yaml")
    done = sign_store(open_store(uri), signer, models or (),
                      note=None if as_json else lambda line: out.print(message_text(line), highlight=False))
    if as_json:
        print_json(done.to_json())
    else:
        out.print(f"{len(done.plans)} plan(s) and {len(done.releases)} release(s) signed, {done.already} already "
                  f"signed, {len(done.refused)} refused", highlight=False)
    if done.refused:
        if not as_json:
            more = f" (and {len(done.refused) - 1} more, above)" if len(done.refused) > 1 else ""
            err.print("[bold red]error:[/] " + message_text(f"{len(done.refused)} refused, left unsigned: "
                                                              f"{done.refused[0]}{more}"),
                      highlight=False, soft_wrap=True)
        raise typer.Exit(1)
