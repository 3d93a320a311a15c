"""Work pools from the fleet: one pool per GPU model, its concurrency limit the GPU count declared for it.

``desired_pools`` reads gpu_targets.yaml; ``pool_drift`` compares that with what the Prefect server has (plain data
handed in by the caller, so this module stays free of Prefect). The control pool runs the parent build-matrix flows
on any CPU machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtfarm.layout import toolchain_label
from trtfarm.vocabulary.fleet import Fleet

CONTROL_POOL = "trtfarm-control"


@dataclass(frozen=True)
class PoolSpec:
    """A work pool the fleet needs."""

    name: str
    type: str
    concurrency_limit: int
    gpus: tuple[str, ...]
    description: str
    queues: tuple[str, ...] = ()  # one per toolchain label: a worker with one toolchain serves its queue only


@dataclass(frozen=True)
class PoolState:
    """A work pool as the server has it."""

    name: str
    type: str
    concurrency_limit: int | None
    queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolDrift:
    """One line of ``trtfarm pools sync``: what differs and what sync does (or would do) about it."""

    pool: str
    declared: str
    on_server: str
    action: str  # create | update | ok | recreate by hand | not in fleet

    @property
    def changes(self) -> bool:
        """True when the server does not match the fleet."""
        return self.action != "ok" and self.action != "not in fleet"


def desired_pools(fleet: Fleet, worker_type: str = "process", control_limit: int = 2) -> list[PoolSpec]:
    """One pool per GPU model (GPUs sharing a pool add up), plus the control pool."""
    counts: dict[str, list[str]] = {}
    for key, gpu in fleet.gpus.items():
        counts.setdefault(gpu.pool, []).append(key)
    used = {fleet.gpus[t.gpu].pool for t in fleet.targets}
    pools = [PoolSpec(name, worker_type, sum(fleet.gpus[k].count for k in keys), tuple(keys),
                      f"trtfarm builds for {', '.join(fleet.gpus[k].nvml_name for k in keys)}",
                      pool_queues(fleet, name))
             for name, keys in sorted(counts.items()) if name in used]
    return [*pools, PoolSpec(CONTROL_POOL, worker_type, control_limit, (), "trtfarm build-matrix parent runs")]


def toolchain_queue(flavour: str, version: str) -> str:
    """The work queue of one toolchain version inside a GPU pool: ``tensorrt-11.4.0.106``."""
    return toolchain_label(flavour, version)


def pool_queues(fleet: Fleet, pool: str) -> tuple[str, ...]:
    """The toolchain queues a pool needs (sorted), one per toolchain version its targets use."""
    return tuple(sorted({toolchain_queue(fleet.toolchains[t.toolchain].flavour.value,
                                         fleet.toolchains[t.toolchain].version)
                         for t in fleet.targets if fleet.gpus[t.gpu].pool == pool}))


def pool_drift(desired: list[PoolSpec], server: list[PoolState]) -> list[PoolDrift]:
    """Compare the fleet's pools with the server's; pools the fleet does not name are reported, never touched."""
    have = {p.name: p for p in server}
    rows = []
    for want in desired:
        declared = f"{want.type}, limit {want.concurrency_limit}" + (f", queues {', '.join(want.queues)}"
                                                                      if want.queues else "")
        got = have.get(want.name)
        if got is None:
            rows.append(PoolDrift(want.name, declared, "missing", "create"))
            continue
        on_server = f"{got.type}, limit {got.concurrency_limit if got.concurrency_limit is not None else 'none'}"
        missing = sorted(set(want.queues) - set(got.queues))
        if got.type != want.type:
            action = "recreate by hand"  # Prefect cannot change a pool's type
        elif got.concurrency_limit != want.concurrency_limit or missing:
            action = "update" + (f" (add queues {', '.join(missing)})" if missing else "")
        else:
            action = "ok"
        rows.append(PoolDrift(want.name, declared, on_server, action))
    named = {w.name for w in desired}
    rows += [PoolDrift(p.name, "-", f"{p.type}, limit {p.concurrency_limit}", "not in fleet")
             for p in server if p.name not in named and not p.name.startswith("prefect")]
    return rows


BUILD_TARGET_ENTRYPOINT = "flows/build_target.py:build_target"
BUILD_MATRIX_ENTRYPOINT = "flows/build_matrix.py:build_matrix"


def deployment_drift(prefect_yaml: Path, desired: list[PoolSpec]) -> list[str]:
    """What prefect.yaml lacks: a ``build-target`` deployment named after each GPU pool, and build-matrix."""
    from trtfarm.yamlfile import load_yaml

    doc = load_yaml(Path(prefect_yaml)) or {}
    have = {(d.get("entrypoint"), d.get("name"), (d.get("work_pool") or {}).get("name"))
            for d in doc.get("deployments") or []}
    problems = []
    for pool in desired:
        if pool.name == CONTROL_POOL:
            if not any(e == BUILD_MATRIX_ENTRYPOINT and p == CONTROL_POOL for e, _, p in have):
                problems.append(f"{prefect_yaml}: no build-matrix deployment on work pool {CONTROL_POOL!r}")
        elif (BUILD_TARGET_ENTRYPOINT, pool.name, pool.name) not in have:
            problems.append(f"{prefect_yaml}: pool {pool.name!r} has no build-target deployment; add "
                            f"`- {{<<: *build_target, name: {pool.name}, work_pool: {{name: {pool.name}}}}}`")
    return problems
