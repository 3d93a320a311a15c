"""``promote``, ``rollback``, ``history`` and ``receipt``: release channels (candidate, stable) and their evidence."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from trtfarm.cli.common import (
    JSON_OPT,
    STORE_OPT,
    TARGETS_OPT,
    app,
    fail,
    message_text,
    out,
    print_json,
    store_uri,
    targets_path,
)
from trtfarm.cli.names import check_channel, other_channel_note
from trtfarm.cli.tables import labelled

TARGET_OPT = typer.Option([], "--target", metavar="ID", help="a fleet target id (repeat); default: every one")
VERDICT_STYLE = {"holds": "green", "waits": "yellow", "fails": "bold red", "already": "dim"}


def _known_model(store, model: str) -> None:
    """Exit 2 for a typo (naming the nearest model of every channel), and for a model neither channel releases.

    A model the store knows only by its plans or its registered export has nothing to promote, roll back or receive.
    """
    from trtfarm.cli.names import check_models
    from trtfarm.layout import channel_prefix

    check_models(store, [model])
    if not any(next(iter(store.list(channel_prefix(c, model))), None) for c in ("stable", "candidate")):
        raise fail(f"{model!r} has no release in either channel in {store.location}: build it (`trtfarm build`, "
                   "`trtfarm farm run`), or release a built plan (`trtfarm release`)")


def _names(store_, model: str, targets: list[str], targets_file: Path | None):
    """The (model, gpu, toolchain) names of ``targets`` (every fleet target when empty) and each one's release_on."""
    from trtfarm.layout import ReleaseName
    from trtfarm.project.fleet_file import load_fleet
    from trtfarm.vocabulary.fleet import select_targets

    resolved = select_targets(load_fleet(targets_path(targets_file, note=False)), targets or None)
    return {ReleaseName(model, t.gpu_key, t.toolchain_label): t for t in resolved}


def _keys(targets_file: Path | None):
    """``(trust, signer)`` for a move from the signing settings in force (``moves.move_keys``: exit 2 without one)."""
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.releases.moves import move_keys

    return move_keys(signing_settings(targets_path(targets_file, note=False)))


@app.command()
def promote(model: str = typer.Argument(..., help="model name (as released)"),
            target: list[str] = TARGET_OPT,
            from_: str = typer.Option("candidate", "--from", metavar="CHANNEL",
                                      help="the channel promoted from (candidate)"),
            to: str = typer.Option("stable", "--to", metavar="CHANNEL", help="the channel moved (stable)"),
            force: bool = typer.Option(False, "--force", help="promote although gates wait or fail (needs --reason; "
                                                              "recorded as an operator override)"),
            reason: str = typer.Option(None, "--reason", help="why (recorded in the history)"),
            targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Move stable to each candidate whose gates hold (accuracy, engine check, latency, canary receipts)."""
    from trtfarm.executor import promote as promote_found
    from trtfarm.executor import promote_exit
    from trtfarm.releases.gates import candidates
    from trtfarm.store import open_store

    check_channel(from_, "--from")
    check_channel(to, "--to")
    if (from_, to) != ("candidate", "stable"):
        raise fail(f"--from {from_} --to {to}: promotion moves stable to the candidate (--from candidate --to "
                   "stable)")
    if force and not (reason or "").strip():
        raise fail("--force needs --reason: an override is recorded with why")
    s = open_store(store_uri(store))
    _known_model(s, model)
    names = _names(s, model, target, targets_file)
    trust, signer = _keys(targets_file)
    found = [c for c in candidates(s, model, {(n.gpu, n.toolchain): t.release_on for n, t in names.items()})
             if c.name in names]
    rows = promote_found(s, found, reason=reason or "promoted: every gate holds", force=force, signer=signer,
                         trust=trust)
    if as_json:
        print_json([r.to_json() for r in rows])
    else:
        _print_promotions(rows)
    if not found:
        raise fail(f"{model} has no candidate for {', '.join(t.id for t in names.values())}: its farm.yaml declares "
                   "no promotion: block (its releases go to stable), or nothing was built since", code=1)
    raise typer.Exit(promote_exit(rows))


def _print_promotions(rows) -> None:
    from rich.table import Table

    from trtfarm.layout import short_ref

    for r in rows:
        c = r.candidate
        head = f"{c.name.gpu} {c.name.toolchain}: {short_ref(c.pointer.manifest).split('/')[-1]}"
        stable = short_ref(c.stable.manifest).split("/")[-1] if c.stable else "nothing"
        out.print(f"[{VERDICT_STYLE.get(c.verdict, 'green')}]{r.action}[/] " + message_text(f"{head} (stable "
                  f"{stable})"), highlight=False)
        gates = Table.grid(padding=(0, 1))
        gates.add_column(no_wrap=True, min_width=7)
        gates.add_column(no_wrap=True)
        gates.add_column()
        for g in c.gates:
            gates.add_row(f"  [{VERDICT_STYLE[g.verdict]}]{g.verdict}[/]", g.name, message_text(g.detail))
        out.print(gates)
        if c.policy_note:
            labelled(out, "policy:", message_text(c.policy_note))
        if r.refused:
            labelled(out, "refused:", message_text(r.refused))


@app.command()
def rollback(model: str = typer.Argument(..., help="model name (as released)"),
             target: list[str] = TARGET_OPT,
             channel: str = typer.Option(..., "--channel", help="the channel to move back: stable or candidate"),
             reason: str = typer.Option("rolled back by hand", "--reason", help="why (recorded in the history)"),
             targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Move a channel back to its previous good release (one with no failed receipt), recorded in its history."""
    from trtfarm.layout import channel_key, short_ref
    from trtfarm.releases.channels import rollback_channel
    from trtfarm.store import open_store

    check_channel(channel)
    s = open_store(store_uri(store))
    _known_model(s, model)
    names = _names(s, model, target, targets_file)
    trust, signer = _keys(targets_file)
    keys = [channel_key(*n, channel) for n in names if s.get(channel_key(*n, channel)) is not None]
    if not keys:
        raise fail(f"{model} has no {channel} release for {', '.join(t.id for t in names.values())}"
                   + other_channel_note(s, names, channel))
    moved = [rollback_channel(s, k, reason=reason, signer=signer, trust=trust) for k in keys]
    if as_json:
        print_json([json.loads(p.to_json()) for p in moved])
        return
    for p in moved:
        back = short_ref(p.manifest).split("/")[-1]
        gone = short_ref(p.history[-2].manifest).split("/")[-1] if len(p.history) > 1 else "?"
        labelled(out, "rolled back:", message_text(f"{p.identity} {channel}: {gone} -> {back}"))


@app.command()
def history(model: str = typer.Argument(..., help="model name (as released)"),
            target: list[str] = TARGET_OPT,
            targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Every release, promotion, rollback, refresh and override of MODEL's channels: when, by whom, why."""
    from trtfarm.releases.channels import channel_history
    from trtfarm.releases.ledger import one_line
    from trtfarm.store import open_store

    s = open_store(store_uri(store))
    _known_model(s, model)
    names = _names(s, model, target, targets_file) if target else None
    problems: list[str] = []
    entries = [h for h in channel_history(s, model, problems) if names is None or
               (h.model, h.gpu, h.toolchain) in names]
    if as_json:
        print_json([h.to_json() for h in entries])
        return
    from rich.padding import Padding

    groups: dict[tuple[str, str], list] = {}
    for h in entries:
        groups.setdefault((h.gpu, h.toolchain), []).append(h)
    for (gpu, toolchain), moves in groups.items():
        out.print(message_text(f"{model} on {gpu} {toolchain}"), style="bold", highlight=False)
        for h in moves:  # a line per move, and why (by whom) under it, folded with its indent
            e = h.event
            out.print(message_text(one_line(f"  {e.at[:16].replace('T', ' ')}  #{h.seq:<4} {h.channel:9} "
                                            f"{e.action:8} {e.manifest.split('/')[-2]}")), highlight=False)
            out.print(Padding(message_text(one_line(f"{e.reason} ({e.by})")), (0, 0, 0, 6)), highlight=False)
    for p in problems:
        labelled(out, "damaged:", message_text(one_line(p)))


@app.command()
def receipt(model: str = typer.Argument(..., help="model name (as released)"),
            target: str = typer.Option(..., "--target", metavar="ID", help="the fleet target the host serves"),
            channel: str = typer.Option("stable", "--channel", help="the channel the host pulled: stable or "
                                                                    "candidate"),
            ok: bool = typer.Option(False, "--ok", help="the plan loaded"),
            failed: str = typer.Option(None, "--failed", metavar="REASON", help="the plan did not load: why"),
            load_ms: float = typer.Option(None, "--load-ms", min=0, help="deserialisation time"),
            latency_ms: float = typer.Option(None, "--latency-ms", min=0, help="first inference latency"),
            plan: str = typer.Option(None, "--plan", metavar="SHA256", help="the plan's sha256 the host loaded, "
                                     "or 12+ of its first digits (needed with --failed; default for --ok: the "
                                     "channel's current plan)"),
            targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Record a serving host's load of a channel's plan: --ok, or --failed REASON (on stable it may roll back)."""
    from trtfarm.layout import channel_key, short_ref
    from trtfarm.publishing.release import who
    from trtfarm.releases.channels import record_receipt, serving_key
    from trtfarm.releases.ledger import one_line
    from trtfarm.releases.receipts import new_receipt, this_host
    from trtfarm.store import open_store

    uri = store_uri(store)  # a store that is not there is named first, as every command does
    if ok == (failed is not None):
        raise fail("say how the load went: --ok, or --failed REASON (one of them)")
    check_channel(channel)
    if failed is not None and plan is None:
        raise fail("--failed needs --plan SHA256: the plan this host loaded (`pull --json` prints its manifest; "
                   "`pull --report` passes it), so the failure is never charged to a plan the channel moved to")
    s = open_store(uri)
    _known_model(s, model)
    (name,) = _names(s, model, [target], targets_file)
    if channel == "stable" and s.get(channel_key(*name, channel)) is None and \
            (note := other_channel_note(s, [name], channel, promote=True)):  # a candidate-only model's receipt
        raise fail(f"{model} has no stable release for {target}{note}")
    trust, signer = _keys(targets_file)
    key = serving_key(s, name, channel)
    done = record_receipt(s, key, lambda p, served: new_receipt(
        p, ok=ok, error=failed, load_ms=load_ms, latency_ms=latency_ms, by=who(), host=this_host(),
        plan_sha256=plan, served=served), signer=signer, trust=trust)
    _emit(done)
    if as_json:
        print_json({"receipt": s.url(done.key), **done.receipt.model_dump(mode="json"),
                          "rolled_back_to": short_ref(done.rolled_back.manifest) if done.rolled_back else None,
                          "blocked": done.blocked or None, "unchanged": done.unchanged or None})
        return
    r = done.receipt
    labelled(out, "receipt:", message_text(one_line(f"{'ok' if r.ok else 'failed'} for {short_ref(r.manifest)} "
                                                    f"({r.channel}) from {r.host.name}")))
    if done.rolled_back:
        p = done.rolled_back
        labelled(out, "rolled back:", message_text(one_line(f"{p.identity} stable -> {short_ref(p.manifest)} "
                                                            f"({p.current.reason})")))
    if done.blocked:
        labelled(out, "blocked:", message_text(done.blocked))
    if done.unchanged:
        labelled(out, "unchanged:", message_text(f"{r.channel} serves another plan now; {done.unchanged}"))


def _emit(done) -> None:
    """A Prefect event when a failed receipt rolled stable back or blocked it (where a Prefect API is configured)."""
    if done.receipt.ok or not (done.rolled_back or done.blocked):
        return
    from flows.events import release_event

    r = done.receipt
    release_event("trtfarm.release.rolled-back" if done.rolled_back else "trtfarm.release.receipt-failed",
                  f"{r.model}/{r.gpu}/{r.toolchain}", {"error": r.error, "host": r.host.name,
                                                       "to": done.rolled_back.manifest if done.rolled_back else None})
