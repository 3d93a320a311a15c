"""Release channels: a build's release lands in ``candidate``; ``stable`` (what serving hosts pull) moves by promotion.

A model whose farm.yaml declares no ``promotion:`` block releases to ``stable`` as before (its candidate channel
follows stable). One that declares it waits in ``candidate`` until ``trtfarm promote`` finds its gates hold:

```yaml
promotion:
  receipts: 2                 # ok load receipts from serving hosts for the candidate's plan, none failed
  soak_s: 3600                # seconds since the first ok receipt
  latency_budget: 0.10        # candidate latency at most 10 % over stable's (validation or receipt figures)
  on_failed_receipt: rollback # a failed receipt on stable rolls it back (or: block, which only records and alerts)
```
A load receipt is what a serving host says after loading a channel's plan: loaded or the error, and its figures.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Channel = Literal["stable", "candidate"]
CHANNELS: tuple[Channel, ...] = ("stable", "candidate")


class Promotion(BaseModel):
    """farm.yaml's ``promotion:`` block: what a candidate needs before it becomes stable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    receipts: int = Field(2, ge=0, description="ok load receipts needed for the candidate's plan, none failed")
    soak_s: float = Field(0, ge=0, description="seconds from the first ok receipt before promotion")
    latency_budget: float | None = Field(None, ge=0, description="how much slower than stable (0.10: 10 %) a "
                                                                 "candidate may be; None: not compared")
    on_failed_receipt: Literal["rollback", "block"] = "rollback"


class ReceiptHost(BaseModel):
    """The serving host a receipt comes from."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    name: str = Field(max_length=253)
    gpu_name: str | None = Field(None, max_length=200)
    pci_device_id: str | None = Field(None, max_length=32)
    driver: str | None = Field(None, max_length=64)
    compute_capability: str | None = Field(None, max_length=8)
    mig: str | None = Field(None, max_length=32, description="the MIG profile of the device, where it is one")


class Receipt(BaseModel):
    """One load of a channel's plan on a serving host: an append-only object in the store."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)  # (not on a build's path)
    schema_version: Literal[1] = 1
    model: str
    gpu: str
    toolchain: str
    channel: Channel
    manifest: str
    plan_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    ok: bool
    error: str | None = Field(None, max_length=2000)
    load_ms: float | None = Field(None, ge=0)
    latency_ms: float | None = Field(None, ge=0)
    at: str
    by: str
    host: ReceiptHost
