"""The load receipt ``load_plan(report=True)`` records: ok with the deserialisation time, or failed with the refusal.

The receipt goes to the channel's ledger (``channels.record_receipt``: a failed one on stable may roll it back, per
the model's promotion policy, while stable still serves that plan) and names the plan loaded: one the channel never
served (a foreign file on this host) is not written; one it served before is recorded and moves nothing. Nothing
here raises: a receipt that cannot be written is a warning naming why.
"""

from __future__ import annotations

import warnings

from trtfarm.errors import TrtfarmError
from trtfarm.layout import ReleaseName, toolchain_label
from trtfarm.project.fleet_file import signing_settings
from trtfarm.publishing.release import who
from trtfarm.releases.channels import ReceiptRecord, record_receipt, serving_key
from trtfarm.releases.receipts import new_receipt, this_host
from trtfarm.store import Store, open_store
from trtfarm.vocabulary.manifest import Manifest


def open_by(store: Store | str) -> Store:
    """``store`` itself, or the store its URI names."""
    return open_store(store) if isinstance(store, str) else store


def record_load(store: Store | str, m: Manifest, channel: str, *, load_ms: float | None = None,
                error: str | None = None, gpus=None) -> ReceiptRecord | None:
    """Record the load of ``m``'s plan (``error``: why it was refused) in ``channel``; the record, or None.

    ``gpus``: the scan the loader checked the plan against (the receipt names the device that serves it).
    """
    try:
        s, settings = open_by(store), signing_settings()
        key = serving_key(s, ReleaseName(m.model.name, m.target.gpu, toolchain_label(m.target.flavour,
                                         m.target.toolchain_version)), channel)
        done = record_receipt(s, key, lambda p, served: new_receipt(
            p, ok=error is None, error=error[:2000] if error else None, load_ms=load_ms, latency_ms=None, by=who(),
            host=this_host(gpus, m), plan_sha256=m.plan.sha256, served=served), signer=settings.signer(),
            trust=settings.trusted_keys())
    except (TrtfarmError, OSError) as err:  # a load is never failed (nor its refusal hidden) by its receipt
        warnings.warn(f"load receipt not recorded: {' '.join(str(err).split())}", stacklevel=3)
        return None
    if done.rolled_back is not None or done.blocked or done.unchanged:
        warnings.warn(f"failed load receipt {s.url(done.key)}: " + (
            f"stable rolled back to {done.rolled_back.manifest}" if done.rolled_back else done.blocked or
            f"{channel} serves another plan now; {done.unchanged}"), stacklevel=3)
    return done
