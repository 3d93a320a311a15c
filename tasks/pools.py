"""Work pools on the Prefect server, made to match the fleet (``trtfarm pools sync``)."""

from __future__ import annotations

from prefect import get_client
from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
from prefect.workers.utilities import get_default_base_job_template_for_infrastructure_type

from trtfarm.pools import PoolDrift, PoolSpec, PoolState, pool_drift


async def sync_work_pools(desired: list[PoolSpec], apply: bool = True) -> list[PoolDrift]:
    """Create missing pools and fix concurrency limits (``apply=False``: only report the drift)."""
    async with get_client() as client:
        server = [PoolState(p.name, p.type, p.concurrency_limit) for p in await client.read_work_pools()]
        drift = pool_drift(desired, server)
        if not apply:
            return drift
        specs = {d.name: d for d in desired}
        for row in drift:
            spec = specs.get(row.pool)
            if row.action == "create":
                template = await get_default_base_job_template_for_infrastructure_type(spec.type) or {}
                await client.create_work_pool(WorkPoolCreate(
                    name=spec.name, type=spec.type, description=spec.description,
                    concurrency_limit=spec.concurrency_limit, base_job_template=template))
            elif row.action == "update":
                await client.update_work_pool(spec.name, WorkPoolUpdate(concurrency_limit=spec.concurrency_limit,
                                                                        description=spec.description))
    return drift
