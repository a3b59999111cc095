"""API: a team's quota (read by its members; GPUs and runs set by platform admins, the ceilings on
the size of its runs by platform admins or the team's admins), and the scheduler's status."""
from __future__ import annotations

from datetime import datetime
from typing import Optional

from django.conf import settings
from django.http import HttpRequest
from ninja import Path, Router, Schema

from controlplane.accounts.selectors import team_get
from controlplane.common.api import ERRORS, body_doc, json_object
from controlplane.runs.cost import amount_text
from controlplane.scheduling import services
from controlplane.scheduling.selectors import gpu_quota_note, scheduler_status
from controlplane.scheduling.models import ResourcePool, TeamQuota

router = Router(tags=["accounts"])


class QuotaOut(Schema):
    team: str
    max_gpus: int
    max_concurrent_runs: int
    ceilings: dict[str, float]
    """Trainer setting path or size -> the most this team's runs may use (below the global bounds)."""
    warnings: list[dict[str, str]] = []
    """What of the quota cannot be used as set (``max_gpus`` with no GPU pool, or more than the pools hold)."""


def _quota_out(quota: TeamQuota) -> dict:
    note = gpu_quota_note(quota.max_gpus)
    return {"team": quota.team.slug, "max_gpus": quota.max_gpus, "max_concurrent_runs": quota.max_concurrent_runs,
            "ceilings": dict(quota.ceilings), "warnings": [{"path": "max_gpus", "message": note}] if note else []}


@router.get("/teams/{slug}/quota", response={200: QuotaOut, **ERRORS})
def quota_get(request: HttpRequest, slug: str):
    quota, _ = TeamQuota.objects.get_or_create(team=team_get(actor=request.auth, slug=slug))
    return _quota_out(quota)


@router.put("/teams/{slug}/quota", response={200: QuotaOut, **ERRORS}, openapi_extra=body_doc(services.TEAM_QUOTA_SCHEMA))
def quota_set(request: HttpRequest, slug: str):
    team = team_get(actor=request.auth, slug=slug)
    return _quota_out(services.team_quota_set(actor=request.auth, team=team, changes=json_object(request)))


class PoolOut(Schema):
    name: str
    kind: str
    capacity: int
    description: str
    price: Optional[str] = None
    """What one unit costs in ``currency`` (a decimal string); null: not set, costs that need it are unknown."""
    price_unit: str
    """What one unit is: GPU-hour, CPU-hour, sandbox-hour or million judge tokens ("" for rollout_gpu: no price)."""
    currency: str


def _pool_out(pool: ResourcePool) -> dict:
    return {"name": pool.name, "kind": pool.kind, "capacity": pool.capacity, "description": pool.description,
            "price": amount_text(pool.price), "price_unit": pool.price_unit,
            "currency": settings.TEMPER_CURRENCY}


@router.get("/pools", response={200: list[PoolOut], **ERRORS})
def pool_list(request: HttpRequest):
    """The resource pools with their capacities and prices (the prices every cost is computed at)."""
    return [_pool_out(p) for p in ResourcePool.objects.all()]


@router.put("/pools/{name}", response={200: PoolOut, **ERRORS}, openapi_extra=body_doc(services.POOL_SCHEMA))
def pool_put(request: HttpRequest, name: str = Path(..., max_length=64)):
    """Create a pool or change its kind, capacity, description or price (platform admins)."""
    return _pool_out(services.pool_set(actor=request.auth, name=name, data=json_object(request)))


class SchedulerOut(Schema):
    at: datetime | None
    """When the last tick ended; null: the scheduler has not run yet."""
    age_s: float | None
    period_s: float
    late: bool
    """No tick for three periods (or never): ``reason`` says what to check."""
    reason: str
    duration_ms: float | None
    queued: int
    admitted: int
    preempted: int
    worker: str


@router.get("/scheduler", response={200: SchedulerOut, **ERRORS})
def scheduler_get(request: HttpRequest):
    """When the scheduler last ran and what that tick decided; whether it is late and why."""
    return scheduler_status()
