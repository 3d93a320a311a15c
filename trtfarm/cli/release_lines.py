"""What a build did to each release pointer, as ``trtfarm build`` prints it under its table (one line a pointer).

A pointer the run moved (old -> new), repaired or was refused; a plan its precision gate holds (published as a
trial: the verdict, the output it rests on, and the fix); and the pointers a trial build left.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from trtfarm.cli.common import message_text, out
from trtfarm.cli.tables import labelled

if TYPE_CHECKING:
    from trtfarm.vocabulary.target_outcome import ReleaseOutcome, TargetOutcome


def held_by_gate(r: ReleaseOutcome | None) -> bool:
    """The plan's precision gate kept the pointer (not a trial asked for, not a refusal)."""
    return r is not None and r.action == "kept" and r.held_by.startswith("precision gate")


def release_lines(rows: list[TargetOutcome], model: str | None = None) -> None:
    """Every release pointer the run moved (old -> new), repaired, was refused or held, and those a trial left.

    ``model``: the export as the build was given it, for the command that releases a held plan anyway.
    """
    done = [o.release for o in rows if o.release is not None]
    for o, r in ((o, o.release) for o in rows if o.release is not None):
        if r.repaired:
            labelled(out, "repaired:", message_text(r.repaired))
        if r.action == "moved":
            labelled(out, f"released{r.to}:", message_text(_move(r)))
        elif r.action == "refused":  # the pointer stays on another plan than this run's: what holds it, and why
            labelled(out, "not released:", message_text(_refused(o.manifest_key, r)))
    held = [r for r in done if held_by_gate(r)]
    for why in dict.fromkeys(r.why for r in held):  # one line per verdict: the pointers, why, and the fix
        where = ", ".join(_where(r.key) for r in held if r.why == why)
        labelled(out, "not released:", message_text(f"{where} {why}; fix: {_fix(model)}"))
    kept = [r for r in done if r.action == "kept" and not held_by_gate(r)]
    for why in dict.fromkeys(r.why for r in kept):
        out.print(message_text(f"not released, {why}; the pointers stay:"), highlight=False)
        for r in (r for r in kept if r.why == why):
            out.print(message_text(f"  {r.key}: {r.old}"), highlight=False)


def _fix(model: str | None) -> str:
    """Held-out data, or the build again with ``--release`` (an override the history records)."""
    again = f"trtfarm build {shlex.quote(model)} --release" if model else "trtfarm build MODEL --release"
    return (f"held-out data (`--heldout heldout.npz`, or heldout.npz beside the export), or `{again}` to release "
            "it anyway (recorded in the history)")


def _where(key: str) -> str:
    """``MODEL/GPU TOOLCHAIN`` of a pointer key (else the key)."""
    from trtfarm.layout import parse_channel_key

    parsed = parse_channel_key(key)
    return f"{parsed[0][0]}/{parsed[0][1]} {parsed[0][2]}" if parsed else key


def _refused(manifest_key: str | None, r) -> str:
    """``MODEL/GPU TOOLCHAIN stays at HELD, not PLAN: why`` (why's ``trtfarm release REF`` names the run's plan)."""
    from trtfarm.layout import parse_channel_key, short_ref

    ref = short_ref(manifest_key) if manifest_key else "this run's plan"
    why = r.why.removeprefix("not released: ")
    name = parsed[0] if (parsed := parse_channel_key(r.key)) else None
    here = f"{name[0]}/{name[1]}/" if name else ""
    where = f"{name[0]}/{name[1]} {name[2]}" if name else r.key
    return f"{where} stays at {r.old.removeprefix(here)}, not {ref.removeprefix(here)}: {why}"


def _move(r) -> str:
    """A moved pointer in one line at 80 columns: ``MODEL/GPU TOOLCHAIN: OLD -> NEW`` with the plans by build id."""
    from trtfarm.layout import parse_channel_key

    parsed = parse_channel_key(r.key)
    if parsed is None:
        return r.move
    name = parsed[0]
    here = f"{name[0]}/{name[1]}/"
    return f"{here.rstrip('/')} {name[2]}: {r.old.removeprefix(here)} -> {r.new.removeprefix(here)}"
