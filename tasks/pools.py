"""Work pools on the Prefect server, made to match the fleet (``trtfarm pools sync``)."""

from __future__ import annotations

from prefect import get_client
from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
from prefect.workers.utilities import get_default_base_job_template_for_infrastructure_type

from trtfarm.pools import PoolDrift, PoolSpec, PoolState, pool_drift


async def sync_work_pools(desired: list[PoolSpec], apply: bool = True,
                          templates: dict[str, dict] | None = None) -> list[PoolDrift]:
    """Create missing pools, fix concurrency limits, add the toolchain queues; ``apply=False`` only reports drift.

    ``templates[pool]`` is the base job template for a new pool (Kubernetes); else the worker type's default.
    """
    templates = templates or {}
    async with get_client() as client:
        server = [PoolState(p.name, p.type, p.concurrency_limit,
                            tuple(q.name for q in await client.read_work_queues(work_pool_name=p.name)))
                  for p in await client.read_work_pools()]
        drift = pool_drift(desired, server)
        if not apply:
            return drift
        specs = {d.name: d for d in desired}
        have = {p.name: p for p in server}
        for row in drift:
            spec = specs.get(row.pool)
            if row.action == "create":
                template = templates.get(spec.name) or await get_default_base_job_template_for_infrastructure_type(
                    spec.type) or {}
                await client.create_work_pool(WorkPoolCreate(
                    name=spec.name, type=spec.type, description=spec.description,
                    concurrency_limit=spec.concurrency_limit, base_job_template=template))
            elif row.action.startswith("update"):
                await client.update_work_pool(spec.name, WorkPoolUpdate(concurrency_limit=spec.concurrency_limit,
                                                                        description=spec.description))
            if spec is not None and (row.action == "create" or row.action.startswith("update")):
                existing = set(have[spec.name].queues) if spec.name in have else set()
                for queue in sorted(set(spec.queues) - existing):
                    await client.create_work_queue(name=queue, work_pool_name=spec.name,
                                                   description=f"builds with {queue}")
    return drift
