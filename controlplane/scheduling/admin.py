from django.contrib import admin

from controlplane.accounts.admin import AuditedAdmin
from controlplane.scheduling.models import ResourcePool, TeamQuota, WorkerHeartbeat


@admin.register(TeamQuota)
class TeamQuotaAdmin(AuditedAdmin):
    list_display = ("team", "max_gpus", "max_concurrent_runs", "ceilings", "updated_at")


@admin.register(ResourcePool)
class ResourcePoolAdmin(AuditedAdmin):
    list_display = ("name", "kind", "capacity", "price", "updated_at")


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("worker", "queues", "last_seen")
