"""Writes for quotas and pools (platform admins), and worker heartbeats (workers)."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import InvalidInput
from controlplane.common.validation import validate
from controlplane.scheduling.models import ResourcePool, TeamQuota, WorkerHeartbeat

TEAM_QUOTA_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "max_gpus": {"type": "integer", "minimum": 0, "maximum": 100000},
        "max_concurrent_runs": {"type": "integer", "minimum": 0, "maximum": 100000},
    },
}

POOL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "capacity"],
    "properties": {
        "kind": {"type": "string", "enum": ["train_gpu", "rollout_gpu", "cpu", "sandbox"]},
        "capacity": {"type": "integer", "minimum": 0, "maximum": 1000000},
        "description": {"type": "string", "maxLength": 200},
    },
}


@transaction.atomic
def team_quota_set(*, actor: Principal, team: Team, changes: dict) -> TeamQuota:
    actor.require_platform_admin("setting team quotas")
    validate(changes, TEAM_QUOTA_SCHEMA, "quota")
    quota, _ = TeamQuota.objects.select_for_update().get_or_create(team=team)
    before = {"max_gpus": quota.max_gpus, "max_concurrent_runs": quota.max_concurrent_runs}
    for name, value in changes.items():
        setattr(quota, name, value)
    quota.full_clean()
    quota.save()
    after = {"max_gpus": quota.max_gpus, "max_concurrent_runs": quota.max_concurrent_runs}
    if after != before:
        audit_record(actor=actor, obj=quota, action="quota.set", before=before, after=after, team=team)
    return quota


@transaction.atomic
def pool_set(*, actor: Principal, name: str, data: dict) -> ResourcePool:
    actor.require_platform_admin("changing resource pools")
    validate(data, POOL_SCHEMA, "pool")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise InvalidInput.one("name", "must be letters, digits, - or _")
    pool = ResourcePool.objects.select_for_update().filter(name=name).first()
    before = None if pool is None else {"kind": pool.kind, "capacity": pool.capacity}
    pool = pool or ResourcePool(name=name)
    for key, value in data.items():
        setattr(pool, key, value)
    pool.full_clean()
    pool.save()
    audit_record(actor=actor, obj=pool, action="pool.set", before=before, after={"kind": pool.kind, "capacity": pool.capacity}, team=None)
    return pool


def heartbeat_record(*, worker: str, queues: list[str], meta: dict | None = None) -> WorkerHeartbeat:
    hb, _ = WorkerHeartbeat.objects.update_or_create(
        worker=worker, defaults={"queues": list(queues), "last_seen": timezone.now(), "meta": meta or {}}
    )
    return hb
