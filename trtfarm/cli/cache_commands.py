"""``trtfarm cache``: the store's shared timing caches, listed, shown and deleted."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from trtfarm.cli.common import JSON_OPT, STORE_OPT, app, fail, message_text, out, print_json, store_uri
from trtfarm.layout_shared import timing_cache_flavour, timing_cache_label, timing_cache_ref, timing_caches_prefix

cache_app = typer.Typer(no_args_is_help=True, help="Shared timing caches, one per exact TensorRT build, GPU model and "
                        "cache-relevant builder flags (TF32, refit, hardware compatibility).")
app.add_typer(cache_app, name="cache")


@cache_app.command("ls")
def cache_ls(store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """List the timing caches in the store."""
    from trtfarm.store import open_store

    s = open_store(store_uri(store))
    rows = [{"key": k, "bytes": len(s.get(k).data)} for k in s.list(timing_caches_prefix())]
    if as_json:
        print_json(rows)
        return
    table = Table(title=message_text(f"timing caches in {s.uri}"))
    table.add_column("toolchain / GPU-SM / flags")
    table.add_column("bytes", justify="right")
    for r in rows:
        table.add_row(timing_cache_label(r["key"]), f"{r['bytes']:,}")
    out.print(table if rows else "no timing caches yet (TensorRT-RTX builds have none)")


@cache_app.command("show")
def cache_show(ref: str = typer.Argument(..., help="TOOLCHAIN/GPU-SM/FLAGS as cache ls shows it, e.g. "
                                          "tensorrt-11.4.0.106/h100-sm90/0123456789ab"),
               store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Size, ETag and (where the toolchain is installed) entry count of one cache."""
    from trtfarm.machine.flavour import ToolchainUnavailable
    from trtfarm.store import open_store
    from trtfarm.toolchain import import_flavour
    from trtfarm.toolchain.engine import timing_cache_entries

    s, key = open_store(store_uri(store)), timing_cache_ref(ref)
    blob = s.get(key)
    if blob is None:
        raise fail(f"no timing cache at {s.url(key)}; `trtfarm cache ls` lists them")
    try:
        entries = timing_cache_entries(import_flavour(timing_cache_flavour(key)), blob.data)
    except ToolchainUnavailable as e:
        entries = f"unknown here ({e})"
    doc = {"key": key, "url": s.url(key), "bytes": len(blob.data), "etag": blob.etag, "entries": entries}
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        out.print(doc)


@cache_app.command("rm")
def cache_rm(ref: str = typer.Argument(..., help="TOOLCHAIN/GPU-SM/FLAGS as cache ls shows it"),
             store: str = STORE_OPT,
             yes: bool = typer.Option(False, "--yes", help="really delete")) -> None:
    """Delete one cache (the next build starts a fresh one)."""
    from trtfarm.store import open_store

    s, key = open_store(store_uri(store)), timing_cache_ref(ref)
    if s.get(key) is None:
        raise fail(f"no timing cache at {s.url(key)}")
    if not yes:
        raise fail(f"would delete {s.url(key)}; add --yes to delete it", code=1)
    s.delete(key)
    out.print(message_text(f"deleted {s.url(key)}"), highlight=False)
