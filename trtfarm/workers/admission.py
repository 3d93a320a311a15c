"""Worker admission: a worker serves a pool only if this machine can build every target of that pool.

Prefect does no capability matching, so ``trtfarm worker --pool P`` checks first: the local GPU model (NVML: its PCI
device id where the fleet declares one, and its MIG profile) against each of the pool's targets (machine/match.py),
and the importable toolchain versions against them. Pools whose targets are all
TensorRT-RTX ahead-of-time builds accept CPU-only machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtfarm.machine.flavour import INSTALL_HINT
from trtfarm.machine.gpu import GpuScan
from trtfarm.machine.header import version_matches
from trtfarm.machine.match import best_fit
from trtfarm.vocabulary.device_spec import spec_of_target
from trtfarm.vocabulary.fleet import Flavour, Fleet, select_targets
from trtfarm.workers.pools import CONTROL_POOL


@dataclass
class WorkerCheck:
    """The verdict for one pool on this machine."""

    pool: str
    found: str
    needs: str
    targets: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when this machine can serve the pool."""
        return not self.problems


def check_worker(fleet: Fleet, pool: str, gpus: GpuScan, versions: dict[str, str | None],
                 queue: str | None = None) -> WorkerCheck:
    """Can this machine (``gpus``, importable toolchain ``versions``) serve ``pool`` (only its toolchain ``queue``)?

    Each GPU pool has one work queue per toolchain version (``tensorrt-11.4.0.106``). A worker for the whole pool
    needs every toolchain of it; a worker for one queue (one TensorRT version per image) needs only that one.
    """
    targets = [t for t in select_targets(fleet) if t.gpu.pool == pool]
    if queue and targets:
        queues = sorted({t.toolchain_label for t in targets})
        if queue not in queues:
            return WorkerCheck(pool, "-", "-", problems=[f"pool {pool!r} has no queue {queue!r}; its queues: {queues}"])
        targets = [t for t in targets if t.toolchain_label == queue]
    pools = sorted({g.pool for g in fleet.gpus.values()} | {CONTROL_POOL})
    found = f"{gpus.describe()}; toolchains: " + (", ".join(f"{k} {v}" for k, v in versions.items() if v) or "none")
    if pool == CONTROL_POOL:  # parent runs only plan, dispatch and report: any machine with trtfarm will do
        return WorkerCheck(pool, found, "any machine (runs build-matrix parent flows; builds nothing)")
    if not targets:
        return WorkerCheck(pool, found, "-", problems=[f"no target uses pool {pool!r}; pools: {pools}"])
    spec = spec_of_target(targets[0])
    aot_only = all(t.toolchain.flavour is Flavour.tensorrt_rtx for t in targets)
    needs = spec.describe() + (" or a CPU-only machine (ahead-of-time builds)" if aot_only else "")
    needs += "; toolchains: " + ", ".join(sorted({t.toolchain_label for t in targets}))
    check = WorkerCheck(pool, found, needs, [t.id for t in targets])
    for t in targets if not aot_only else []:
        fits = best_fit(spec_of_target(t), gpus)
        if not fits.ok:
            check.problems.append(f"pool {pool!r} builds on {spec.describe()}; this machine has {gpus.describe()}"
                                  f"{': ' + fits.reason if gpus.gpus else ''}. Start this worker on a pool of its "
                                  "GPU instead.")
    for t in targets:
        have, want = versions.get(t.toolchain.flavour.value), t.toolchain.version
        if not have or not version_matches(have, want):
            hint = INSTALL_HINT[t.toolchain.flavour.value].replace("VERSION", want)
            check.problems.append(f"target {t.id} needs {t.toolchain.flavour.value} {want}; installed: "
                                  f"{have or 'not importable'} ({hint})")
    check.problems = list(dict.fromkeys(check.problems))
    return check
