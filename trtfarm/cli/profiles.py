"""``profiles derive``: optimization profiles from logged request shapes."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from trtfarm.cli.common import JSON_OPT, app, err, output_path, print_json

profiles_app = typer.Typer(no_args_is_help=True, help="Optimization profiles from logged request shapes.")
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("derive")
def profiles_derive(
    log: Path = typer.Argument(..., exists=True, dir_okay=False,
                               help="shape log: JSONL ({\"input_ids\": [16, 87], ...} per line) or CSV"),
    cap: list[str] = typer.Option([], "--cap", help="hard cap INPUT:DIM=N, e.g. input_ids:1=512 (repeat)"),
    max_batch: int = typer.Option(None, "--max-batch", min=1, help="largest batch the server forms"),
    granularity: int = typer.Option(16, "--granularity", min=1, help="bucket size for non-batch dimensions"),
    max_profiles: int = typer.Option(2, "--max-profiles", min=1, max=4, help="most profiles to consider"),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="per-context budget: batch x length"),
    model: Path = typer.Option(None, "--model", exists=True, dir_okay=False,
                               help="the ONNX, for activation-memory estimates"),
    out: Path = typer.Option(None, "--out", help="write the profiles YAML here"),
    as_json: bool = JSON_OPT,
) -> None:
    """Derive optimization profiles (one, or more when traffic has regimes) from a shape log."""
    from trtfarm.profiles.derive import (
        Constraints,
        derivation_file,
        derive_profiles,
        onnx_activation_bytes,
        parse_cap,
        write_profiles_file,
    )
    from trtfarm.profiles.profile import profile_texts
    from trtfarm.profiles.shapelog import read_shape_log

    if out:
        output_path(out, "--out", folder=False)
    constraints = Constraints(caps=dict(parse_cap(c) for c in cap), max_batch=max_batch,
                              granularity=granularity, max_profiles=max_profiles, max_tokens=max_tokens)
    derived = derive_profiles(read_shape_log(log), constraints, onnx_activation_bytes(model) if model else None)
    doc = derivation_file(derived, str(log))
    if out:
        write_profiles_file(doc, out)
    if as_json:
        print_json({"profiles": profile_texts(doc.profiles),
                    "buckets": doc.buckets, "report": doc.report})
        return
    from trtfarm.publishing.catalog import derivation_table

    out_note = f"; written to {out}" if out else "; use --out FILE to save it"
    Console().print(derivation_table(derived, str(log)))
    err.print(f"{derived.records:,} records, {derived.rejected:,} beyond the caps{out_note}", highlight=False,
              markup=False)

