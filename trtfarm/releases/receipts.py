"""Load receipts: what a serving host says after loading a channel's plan, as append-only objects in the store.

``receipts/<model>/<gpu>/<toolchain>/<channel>/<plan_sha256:16>/<at>-<host>-<nonce>.json``, written create-only
(``put_if_absent``): a receipt is never rewritten. A receipt names the plan by its sha256; one for a plan that was
never in the channel's ledger is refused before anything is written, and so is one from a host whose GPU cannot
serve the plan (``machine.match``, the rule ``verify`` and ``pull`` use). A receipt counts (``counting``) only from
such a host, once per host and plan. What a failed receipt does is the state machine's (``channels.record_receipt``).
"""

from __future__ import annotations

import re
import secrets
import socket
from datetime import datetime, timezone

from pydantic import ValidationError

from trtfarm.errors import UserInputError
from trtfarm.layout import receipts_prefix
from trtfarm.machine.match import Fit
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import Manifest, validation_problems
from trtfarm.vocabulary.pointer import ReleasePointer
from trtfarm.vocabulary.promotion import Receipt, ReceiptHost


def this_host(scan=None, m: Manifest | None = None) -> ReceiptHost:
    """This host as a receipt names it: its name and its GPU (name, PCI id, compute capability, driver).

    ``scan``: one already made (else NVML is asked); ``m``: the plan's manifest, to name the device that serves it best.
    """
    from trtfarm.machine.gpu import scan_gpus
    from trtfarm.machine.match import best_fit
    from trtfarm.vocabulary.device_spec import spec_of_manifest

    scan = scan or scan_gpus()
    gpu = best_fit(spec_of_manifest(m), scan).device if m is not None and scan.gpus else None
    gpu = gpu or (scan.gpus[0] if scan.gpus else None)
    return ReceiptHost(name=socket.gethostname(), gpu_name=gpu.name if gpu else None,
                       pci_device_id=gpu.pci_device_id if gpu else None, driver=scan.driver,
                       compute_capability=gpu.compute_capability if gpu else None,
                       mig=gpu.mig.profile if gpu and gpu.mig else None)


def host_fit(host: ReceiptHost, m: Manifest) -> Fit:
    """Whether the receipt's host can serve ``m``'s plan: the device rule of ``verify`` and ``pull``."""
    from trtfarm.machine.gpu import LocalGpu, MigInstance
    from trtfarm.machine.match import fit
    from trtfarm.vocabulary.device_spec import spec_of_manifest

    if not host.gpu_name or not host.compute_capability:
        return Fit("no", f"{host.name} named no NVIDIA GPU (NVML found none): a receipt comes from the serving "
                         "host that loaded the plan")
    gpu = LocalGpu(index=0, name=host.gpu_name, compute_capability=host.compute_capability, memory_gib=0.0,
                   pci_device_id=host.pci_device_id, mig=MigInstance(host.mig, None, 0.0) if host.mig else None)
    return fit(spec_of_manifest(m), gpu)


def check_host(r: Receipt, m: Manifest) -> None:
    """``UserInputError`` naming both GPUs when the receipt's host cannot serve ``m``'s plan."""
    fitted = host_fit(r.host, m)
    if not fitted.ok:
        gpu = r.host.gpu_name or "no NVIDIA GPU"
        raise UserInputError(f"not recorded: {r.host.name} ({gpu}) cannot serve {r.model}/{r.gpu}/{r.toolchain}, a "
                             f"plan for {m.target.gpu_name} ({fitted.reason}); a receipt counts only from a host "
                             "whose GPU the target serves (`trtfarm verify` shows what this host serves)")


def counting(receipts: list[Receipt], m: Manifest) -> list[Receipt]:
    """The receipts that count for ``m``'s plan: from a host that can serve it, one ok and one failure per host."""
    seen, out = set(), []
    for r in receipts:
        if r.plan_sha256 == m.plan.sha256 and (r.host.name, r.ok) not in seen and host_fit(r.host, m).ok:
            seen.add((r.host.name, r.ok))
            out.append(r)
    return out


def receipt_key(r: Receipt) -> str:
    """Where ``r`` is written: its plan's folder of receipts, named by time, host and a nonce (never two alike)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", r.host.name)[:60] or "host"
    at = re.sub(r"[^0-9TZ]", "", r.at)[:20]
    return receipts_prefix(r.model, r.gpu, r.toolchain, r.channel, r.plan_sha256) + \
        f"{at}-{host}-{secrets.token_hex(4)}.json"


def list_receipts(store: Store, model: str, gpu: str, toolchain: str, channel: str, plan_sha256: str,
                  problems: list[str] | None = None) -> list[Receipt]:
    """The receipts of one plan in one channel, oldest first; damaged ones are skipped (and named in ``problems``)."""
    found = []
    for key in store.list(receipts_prefix(model, gpu, toolchain, channel, plan_sha256)):
        blob = store.get(key)
        try:
            r = Receipt.model_validate_json(blob.data) if blob else None
        except ValidationError as err:
            if problems is not None:
                problems.append(f"{store.url(key)}: not a receipt ({validation_problems(err)})")
            continue
        if r is not None and r.plan_sha256 == plan_sha256 and (r.model, r.gpu, r.toolchain, r.channel) == \
                (model, gpu, toolchain, channel):
            found.append(r)
    return sorted(found, key=lambda r: r.at)


def new_receipt(pointer: ReleasePointer, *, ok: bool, error: str | None, load_ms: float | None,
                latency_ms: float | None, by: str, host: ReceiptHost | None = None, plan_sha256: str | None = None,
                served: dict[str, str] | None = None) -> Receipt:
    """A receipt for the plan ``plan_sha256`` (default: the one ``pointer`` names now) of the pointer's channel.

    ``served`` (plan sha256 -> manifest key, ``channels.served_plans``): the plans the channel's ledger has served; a
    receipt may name any of them (a host reports what it loaded, and the channel may have moved since), never
    another. A unique prefix of 12 or more hex digits names a plan too.
    """
    served = served if served is not None else {pointer.plan_sha256: pointer.manifest}
    plan_sha256 = _named_plan(pointer, plan_sha256, served)
    if not ok and not (error or "").strip():
        raise UserInputError("a failed receipt needs its reason: --failed 'what went wrong'")
    host = host or ReceiptHost(name=socket.gethostname())
    try:
        return Receipt(model=pointer.model, gpu=pointer.gpu, toolchain=pointer.toolchain, channel=pointer.channel,
                       manifest=served[plan_sha256], plan_sha256=plan_sha256, ok=ok,
                       error=None if ok else error, load_ms=load_ms, latency_ms=latency_ms, by=by,
                       at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"), host=host)
    except ValidationError as err:
        raise UserInputError(f"not a receipt: {validation_problems(err)}") from err


def _named_plan(pointer: ReleasePointer, plan: str | None, served: dict[str, str]) -> str:
    """The full sha256 a receipt names: the current plan by default, else one the ledger served."""
    if plan is None:
        return pointer.plan_sha256
    found = [sha for sha in served if sha == plan.lower() or (len(plan) >= 12 and sha.startswith(plan.lower()))]
    if len(found) != 1:
        raise UserInputError(f"the plan {plan[:16]} was never in the {pointer.channel} channel of {pointer.identity} "
                             f"(it serves {pointer.plan_sha256[:16]}); report the plan you loaded against the channel "
                             "you pulled it from (`--channel`)")
    return found[0]
