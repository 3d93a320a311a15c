"""Who built a plan: the worker's name and pool, its host, its image (with its digest where one is known) and GPU.

``trtfarm worker`` exports ``TRTFARM_WORKER_NAME`` and ``TRTFARM_WORKER_POOL`` to the Prefect worker it becomes,
so every child it starts inherits them. A container cannot read its own image digest: the deployment says it with
``TRTFARM_WORKER_IMAGE`` (``repo:tag@sha256:...``; compose and Kubernetes templates can set it). Without a digest
the provenance names the image the fleet declares for the toolchain and says that no digest is known.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from trtfarm.machine.gpu import GpuScan, scan_gpus

NAME_ENV, POOL_ENV, IMAGE_ENV = "TRTFARM_WORKER_NAME", "TRTFARM_WORKER_POOL", "TRTFARM_WORKER_IMAGE"
NO_GPU = "none: built ahead of time on CPU"
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class WorkerIdentity:
    """The machine that ran a build, as its provenance records it."""

    name: str
    host: str
    pool: str | None
    image: str | None
    image_digest: str | None  # sha256 hex of the image manifest, when the deployment said it
    image_note: str  # where the image came from, and why there is no digest when there is none
    gpu: str  # the GPUs NVML reports, or NO_GPU

    def to_json(self) -> dict:
        """The provenance's ``worker`` object."""
        return {"name": self.name, "host": self.host, "pool": self.pool, "image": self.image,
                "image_digest": f"sha256:{self.image_digest}" if self.image_digest else None,
                "image_note": self.image_note, "gpu": self.gpu}


def _image(env: Mapping[str, str], declared: str | None, toolchain: str) -> tuple[str | None, str | None, str]:
    ref = env.get(IMAGE_ENV, "").strip()
    if ref:
        digest = _DIGEST.search(ref)
        return ref, digest.group(1) if digest else None, (f"{IMAGE_ENV} names the image with its digest" if digest
                                                          else f"{IMAGE_ENV} names the image; no digest known (give "
                                                          "it as repo:tag@sha256:...)")
    if declared:
        return declared, None, (f"declared image of toolchain {toolchain} in gpu_targets.yaml; no digest known "
                                f"(set {IMAGE_ENV}=repo:tag@sha256:... on the worker)")
    return None, None, f"no image: neither {IMAGE_ENV} nor toolchain {toolchain} in gpu_targets.yaml names one"


def this_worker(declared_image: str | None, toolchain: str, *, env: Mapping[str, str] | None = None,
                gpus: GpuScan | None = None) -> WorkerIdentity:
    """This machine as a builder of ``toolchain`` (whose image the fleet declares as ``declared_image``)."""
    env = os.environ if env is None else env
    host = socket.gethostname()
    image, digest, note = _image(env, declared_image, toolchain)
    scan = gpus or scan_gpus()
    gpu = ", ".join(f"{g.name} (cc {g.compute_capability})" for g in scan.gpus) if scan.gpus else NO_GPU
    return WorkerIdentity(env.get(NAME_ENV, "").strip() or f"local:{host}", host, env.get(POOL_ENV, "").strip() or None,
                          image, digest, note, gpu)
