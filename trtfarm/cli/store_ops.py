"""Store operations: ``release``, ``pull``, ``verify`` and ``gc`` (``cache`` is ``cache_commands.py``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

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
def release(manifest: str = typer.Argument(..., help="the plan's manifest: store key, URL or path"),
            reason: str = typer.Option(..., "--reason", help="why (recorded in the pointer's history)"),
            rollback: bool = typer.Option(False, "--rollback", help="allow moving back to an older export"),
            force: bool = typer.Option(False, "--force", help="release although the verification policy refuses"),
            targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Move (or roll back) a release pointer by hand, recorded with who and why."""
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.publishing.catalog import load_manifest
    from trtfarm.publishing.release import stored_manifest_key
    from trtfarm.releases.moves import move_release
    from trtfarm.store import open_store
    from trtfarm.vocabulary.manifest import ManifestInvalid

    if not reason.strip():
        raise fail("--reason is empty: say why the pointer moves (it is recorded in the pointer's history)")
    try:
        url, m = load_manifest(manifest, store_uri(store))
        s = open_store(store_uri(store))
        key = stored_manifest_key(s, m, url)
        settings = signing_settings(targets_path(targets_file))
        trust, signer = settings.trusted_keys(), settings.signer()
        if trust is not None and signer is None:
            raise fail("verification is on, and serving hosts refuse a release no trusted key signed: set "
                       "TRTFARM_SIGNING_KEY (or signing.key in gpu_targets.yaml) to a key whose public half is "
                       "trusted")
        accepted, _ = _host_memory(trust)
        pointer = move_release(s, key, m, release_on=_release_on(targets_file, m.target.target_id),
                                   reason=reason, rollback=rollback, force=force, trust=trust, signer=signer,
                                   accepted=accepted)
    except ManifestInvalid as e:  # a store's manifest that is not one is a damaged object; a local file, bad input
        raise fail(e, code=None if Path(manifest).is_file() else 1) from e
    if as_json:
        print(pointer.to_json().decode())
        return
    ev = pointer.released  # an unmoved pointer: its release, not a later refresh
    signed = f", version {pointer.version} signed" if pointer.claim else f", version {pointer.version} unsigned"
    out.print(message_text(f"{pointer.model}/{pointer.gpu}/{pointer.toolchain} -> {pointer.manifest} "
                           f"({ev.action} by {ev.by}: {ev.reason}{signed})"), highlight=False)


def _release_on(targets_file: Path | None, target_id: str) -> str:
    """The target's release policy in the fleet a build reads: the fleet file, else this machine's built-in fleet."""
    from trtfarm.project.fleet_file import BUILTIN_FLEET, load_fleet

    path = targets_path(targets_file, note=False)  # the release command said which fleet already
    if path != BUILTIN_FLEET and not Path(path).is_file():
        return "engine"
    return next((t.release_on for t in load_fleet(path).targets if t.id == target_id), "engine")


@app.command()
def pull(model: str = typer.Argument(..., help="model name"),
         to: Path = typer.Option(None, "--to", help="where to write the plan [default: ./MODEL.plan]"),
         gpu: str = typer.Option(None, "--gpu", help="fleet GPU key instead of this host's GPU"),
         toolchain: str = typer.Option(None, "--toolchain", help="e.g. tensorrt-11.4.0.106 instead of the installed"),
         check: bool = typer.Option(False, "--check", help="then run verify's checks on the pulled plan here "
                                    "(the runtime's header check included); exit 1 when one refuses it"),
         channel: str = typer.Option("stable", "--channel", help="stable, or candidate (a canary host)"),
         report: bool = typer.Option(False, "--report", help="then record a load receipt in the store: ok when "
                                     "--check's checks pass, failed when only the runtime refuses the plan "
                                     "(implies --check)"),
         targets_file: Path = TARGETS_OPT, store: str = STORE_OPT, as_json: bool = JSON_OPT) -> None:
    """Fetch the plan released for this host's GPU and toolchain, checked, with its manifest beside it.

    With trusted keys configured (TRTFARM_TRUSTED_KEYS or gpu_targets.yaml) the signature is checked before any plan
    byte is downloaded; without, the pull says it is unsigned-checked. ``--check`` then runs ``verify``'s checks on
    the pulled plan on this host and says the verdict in one line.
    """
    from trtfarm.cli.fleet_source import view_fleet
    from trtfarm.cli.names import check_channel, check_models
    from trtfarm.machine.capabilities import local_capabilities
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.runtime.pull import local_gpu_key, local_toolchains, pull_release
    from trtfarm.store import open_store

    if to is not None:
        output_path(to, "--to", folder=to.is_dir())
    check_channel(channel)
    check = check or report
    uri = store_uri(store)
    check_models(open_store(uri), [model])  # a typo names the nearest model of every channel, before the fleet
    caps = local_capabilities()
    path, fleet = view_fleet(targets_file, open_store(uri))  # no fleet file here: the store's recorded fleet
    trust = signing_settings(path, only="trust").trusted_keys()
    gpu_key = local_gpu_key(fleet, caps.gpus, gpu)
    accepted, max_age = _host_memory(trust)
    pulled = pull_release(open_store(uri), model, gpu_key,
                          local_toolchains(caps.versions, toolchain), to, fleet=fleet, trust=trust,
                          accepted=accepted, max_age=max_age, channel=channel)
    claim = pulled.release.claim
    doc = {"plan": str(pulled.plan), "manifest": str(pulled.manifest_path), "release": pulled.pointer_key,
           "bytes": pulled.bytes, "transfer": pulled.transfer,
           "signature": pulled.verdict.status, "signature_detail": pulled.verdict.detail,
           "release_version": claim.version if claim else None, "release_detail": pulled.release.detail}
    checks = _pulled_checks(pulled, trust, model) if check else None
    if checks is not None:
        doc["check"] = {"ok": all(c.ok is not False for c in checks),
                        "checks": [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks]}
    if report:
        doc["receipt"] = _report(open_store(uri), pulled, checks, targets_file)
    if as_json:
        print_json(doc)
    else:
        if pulled.transfer:
            err.print(message_text(pulled.transfer), highlight=False)
        out.print(message_text(f"pulled {pulled.pointer_key} -> {pulled.plan} ({pulled.bytes:,} bytes, sha256 "
                               "checked)"), highlight=False)
        (out if pulled.verdict.ok else err).print(message_text(f"signature: {pulled.verdict.detail}"),
                                                  highlight=False)
        (out if claim else err).print(message_text(f"release: {pulled.release.detail}"), highlight=False)
        if checks is not None:
            _check_line(checks)
        if report:
            out.print(message_text(f"receipt: {doc['receipt']}"), highlight=False)
    if checks is not None and not doc["check"]["ok"]:
        raise typer.Exit(1)


def _report(s, pulled, checks, targets_file) -> str:
    """Record the pull's load receipt (ok, or the first refused check) against the channel it pulled from."""
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.publishing.release import who
    from trtfarm.releases.channels import record_receipt
    from trtfarm.releases.receipts import new_receipt, this_host

    bad = next((c for c in checks if c.ok is False), None)
    if bad is not None and bad.name != "runtime":  # this host's mismatch or copy, not the plan: no receipt
        return f"not recorded: this host refused the plan before the runtime saw it ({bad.name}: {bad.detail})"
    settings = signing_settings(targets_path(targets_file, note=False))
    plan_sha = pulled.release.claim.plan_sha256 if pulled.release.claim else None
    done = record_receipt(s, pulled.pointer_key, lambda p, served: new_receipt(
        p, ok=bad is None, error=f"{bad.name}: {bad.detail}" if bad else None, load_ms=None, latency_ms=None,
        by=who(), host=this_host(), plan_sha256=plan_sha, served=served), signer=settings.signer(),
        trust=settings.trusted_keys())
    moved = f"; stable rolled back to {done.rolled_back.manifest}" if done.rolled_back else \
        f"; {done.blocked}" if done.blocked else ""
    return f"{'ok' if done.receipt.ok else 'failed'}, {s.url(done.key)}{moved}"


def _pulled_checks(pulled, trust, model: str) -> list:
    """``verify``'s checks on a plan ``pull`` just wrote, against this host's GPUs and toolchain."""
    from trtfarm.runtime.plan_files import find_files

    return plan_checks(find_files(pulled.plan), trust, model=model)


def _check_line(checks) -> None:
    """``check: ok (sha256, header, ...)``, or ``check: refused: why; why`` (on stderr): one line."""
    bad = [condensed(c.detail) for c in checks if c.ok is False]
    if bad:
        err.print("check: refused: " + "; ".join(bad), highlight=False, soft_wrap=not err.is_terminal, markup=False)
        return
    passed = ", ".join(c.name + ("" if c.ok else " not run" if c.name != "signature" else " unsigned-checked")
                       for c in checks)
    out.print(f"check: ok ({passed})", highlight=False, soft_wrap=not out.is_terminal, markup=False)


def _host_memory(trust):
    """This host's accepted releases and freeze limit (only with trusted keys: an unsigned claim proves nothing)."""
    from trtfarm.signing.accepted import AcceptedReleases, configured_max_age

    return (AcceptedReleases(), configured_max_age()) if trust is not None else (None, None)


@app.command()
def verify(ref: Path = typer.Argument(..., help="a plan (manifest beside it) or a manifest"),
           onnx_digest: str = typer.Option(None, "--onnx-digest", help="the model digest this host expects"),
           gpu_name: str = typer.Option(None, "--gpu-name", help="check against this GPU instead of the local one"),
           compute_capability: str = typer.Option(None, "--compute-capability", help="with --gpu-name"),
           model: str = typer.Option(None, "--model", help="the model this host serves: a plan of another model "
                                     "is refused"),
           targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Check a plan against its manifest, this host and the fleet's trusted keys, then load it."""
    from trtfarm.machine.gpu import GpuScan, LocalGpu
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.runtime.plan_files import find_files
    from trtfarm.vocabulary.manifest import ManifestInvalid

    try:
        files = find_files(ref)
        plan, m = files.plan, files.manifest
        trust = signing_settings(targets_path(targets_file), only="trust").trusted_keys()
        gpus = GpuScan((LocalGpu(0, gpu_name, compute_capability or m.target.compute_capability, 0),), None) \
            if gpu_name else None
        checks = plan_checks(files, trust, onnx_digest=onnx_digest, model=model, gpus=gpus,
                             stand_in=f"--gpu-name {gpu_name!r}" if gpu_name else None)
    except ManifestInvalid as e:  # the manifest beside a plan is damaged or replaced: a refusal, not bad input
        raise fail(f"refused: {e}", code=1) from e
    rows = [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks]
    ok = all(c.ok is not False for c in checks)
    sig = next(c for c in checks if c.name == "signature")
    signature = "signed" if sig.ok else "unsigned-checked" if sig.ok is None else "refused"
    if as_json:
        print_json({"plan": str(plan), "ok": ok, "signature": signature, "checks": rows})
    else:
        _verify_table(plan, checks)
    if not ok:
        err.print("refused: " + "; ".join(condensed(c.detail) for c in checks if c.ok is False), highlight=False,
                  soft_wrap=not err.is_terminal, markup=False)
        raise typer.Exit(1)
    if sig.ok is None:
        err.print(f"ok, unsigned-checked: {sig.detail.removeprefix('unsigned-checked: ')}", style="yellow",
                  highlight=False, soft_wrap=not err.is_terminal, markup=False)


def plan_checks(files, trust, *, onnx_digest: str | None = None, model: str | None = None, gpus=None,
                stand_in: str | None = None) -> list:
    """``verify``'s checks of a plan on disk, for ``verify`` and ``pull --check``.

    The static checks, then (when those that make it safe to deserialise pass, and ``gpus`` are this host's, not
    ``stand_in``) the runtime's header-only check and deserialisation.
    """
    from trtfarm.runtime.loader import VerifyCheck, runtime_check, static_checks

    checks = static_checks(files.plan, files.manifest, expected_onnx_digest=onnx_digest, expected_model=model,
                           gpus=gpus, files=files, trust=trust)
    # an untrusted plan is never deserialised: a version-compatible one would run its host code
    intact = all(c.ok is not False for c in checks if c.name in ("sha256", "header", "toolchain", "signature",
                                                                 "identity"))
    if intact and stand_in is None:  # ask the runtime too, so a GPU mismatch also shows the runtime's own reason
        checks.append(runtime_check(files.plan, files.manifest))
    elif intact:
        checks.append(VerifyCheck("runtime", None, f"not run: checked against {stand_in}, not a local GPU"))
    return checks


def condensed(text: str) -> str:
    """A runtime's error chain as a person reads it: each CUDA error once, with what raised it, no source paths.

    ``--json`` keeps the whole text. ``"deserialize_cuda_engine refused it: IRuntime::...: Error Code 1: Cuda Runtime
    (In ScopedCudaStream at /_src/...:25 (cudaError 35: CUDA driver version is insufficient ...))"`` becomes
    ``"deserialize_cuda_engine refused it: CUDA driver version is insufficient ... (cudaError 35)"``; the header
    check's ``get_engine_validity: INVALID (...)`` keeps its verdict: ``get_engine_validity: INVALID: CUDA ...``.
    """
    import re

    parts, seen = [], set()
    for part in text.split("; "):
        found = re.search(r"cudaError (\d+): ([^)]+)", part)
        if not found:
            parts.append(part)
        elif found.groups() not in seen:
            seen.add(found.groups())
            verdict = re.match(r"get_engine_validity: [A-Z_]+", part)  # the header check's verdict stays
            lead = "CUDA runtime" if part.startswith("[") else verdict.group(0) if verdict else part.split(": ", 1)[0]
            parts.append(f"{lead}: {found.group(2)} (cudaError {found.group(1)})")
    return "; ".join(parts)


def _verify_table(plan: Path, checks) -> None:
    table = Table(title=message_text(f"verify {plan}"))
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")  # by words; only a token longer than the column folds
    for c in checks:
        unsigned = "[yellow]unsigned-checked[/]" if c.name == "signature" else "[yellow]skipped[/]"
        mark = "[green]ok[/]" if c.ok else unsigned if c.ok is None else "[red]MISMATCH[/]"
        table.add_row(message_text(c.name), mark, message_text(condensed(c.detail)))
    out.print(table)


@app.command()
def gc(keep: int = typer.Option(3, "--keep", min=1, help="newest plans to keep per (model, GPU, toolchain)"),
       apply: bool = typer.Option(False, "--apply", help="delete (the default is a dry run)"),
       store: str = STORE_OPT, targets_file: Path = TARGETS_OPT, as_json: bool = JSON_OPT) -> None:
    """Delete old plans; keeps the newest N per pointer and everything a release pointer references.

    What each pointer references is the state status shows (each model's state record where it is current and
    signed by a trusted key, else computed from the store's objects).
    """
    from trtfarm.project.fleet_file import signing_settings
    from trtfarm.publishing.gc import delete_plans, plans_to_delete
    from trtfarm.state.views import release_references
    from trtfarm.store import open_store

    trust = signing_settings(targets_path(targets_file, note=False), only="trust").trusted_keys()
    s = open_store(store_uri(store))
    skipped: list[str] = []
    with err.status("reading the store's release pointers and manifests", spinner="dots"):
        doomed = plans_to_delete(s, keep, release_references(s, trust), skipped)
    freed = delete_plans(s, doomed) if apply else 0
    for line in skipped:
        err.print(f"skipped: {line}", highlight=False, soft_wrap=not err.is_terminal, markup=False)
    if as_json:
        print_json({"applied": apply, "freed_bytes": freed, "plans": [d.__dict__ for d in doomed],
                    "skipped": skipped})
        return
    for d in doomed:
        out.print(message_text(f"{'deleted' if apply else 'would delete'} {d.manifest_key} ({d.bytes:,} bytes): "
                               f"{d.why}"), highlight=False)
    total = sum(d.bytes for d in doomed)
    out.print(f"{len(doomed)} plan(s), {total:,} bytes" + ("" if apply else " — dry run; add --apply to delete"))



