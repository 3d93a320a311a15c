"""Load receipts: what a serving host says after loading a channel's plan, as append-only objects in the store.

``receipts/<model>/<gpu>/<toolchain>/<channel>/<plan_sha256:16>/<at>-<host>-<nonce>.json``, written create-only
(``put_if_absent``): a receipt is never rewritten. A receipt names the plan by its sha256; one for a plan that is not
the channel's current plan is refused before anything is written. A failed receipt on ``stable`` rolls ``stable``
back to its previous good release when the model's policy says ``rollback`` (``channels.rollback_channel``), else it
is recorded and reported (``block``): the caller raises the alert (a Prefect event on the farm); that step is
``channels.record_receipt``.
"""

from __future__ import annotations

import re
import secrets
import socket
from datetime import datetime, timezone

from pydantic import ValidationError

from trtfarm.errors import UserInputError
from trtfarm.layout import receipts_prefix
from trtfarm.store import Store
from trtfarm.vocabulary.manifest import validation_problems
from trtfarm.vocabulary.pointer import ReleasePointer
from trtfarm.vocabulary.promotion import Receipt, ReceiptHost


def this_host(gpu_index: int = 0) -> ReceiptHost:
    """This host as a receipt names it: its name, and its GPU's name, PCI device id and driver where NVML answers."""
    from trtfarm.machine.gpu import scan_gpus

    scan = scan_gpus()
    gpu = scan.gpus[gpu_index] if len(scan.gpus) > gpu_index else None
    return ReceiptHost(name=socket.gethostname(), gpu_name=gpu.name if gpu else None,
                       pci_device_id=gpu.pci_device_id if gpu else None, driver=scan.driver)


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
                latency_ms: float | None, by: str, host: ReceiptHost | None = None,
                plan_sha256: str | None = None) -> Receipt:
    """A receipt for the plan ``pointer`` names now; ``plan_sha256`` (what the host loaded) must be that plan."""
    if plan_sha256 is not None and plan_sha256 != pointer.plan_sha256:
        raise UserInputError(f"the plan {plan_sha256[:16]} is not in the {pointer.channel} channel of "
                             f"{pointer.identity} (it serves {pointer.plan_sha256[:16]}); report the plan you loaded "
                             f"against the channel you pulled it from (`--channel`)")
    if not ok and not (error or "").strip():
        raise UserInputError("a failed receipt needs its reason: --failed 'what went wrong'")
    try:
        return Receipt(model=pointer.model, gpu=pointer.gpu, toolchain=pointer.toolchain, channel=pointer.channel,
                       manifest=pointer.manifest, plan_sha256=pointer.plan_sha256, ok=ok,
                       error=None if ok else error, load_ms=load_ms, latency_ms=latency_ms, by=by,
                       at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                       host=host or ReceiptHost(name=socket.gethostname()))
    except ValidationError as err:
        raise UserInputError(f"not a receipt: {validation_problems(err)}") from err
