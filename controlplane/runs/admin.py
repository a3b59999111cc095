from django.contrib import admin

from controlplane.accounts.admin import AuditedAdmin
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunDomain, RunEvent, Trajectory


class RunDomainInline(admin.TabularInline):
    model = RunDomain
    extra = 0
    raw_id_fields = ("domain", "domain_version")


@admin.register(Run)
class RunAdmin(AuditedAdmin):
    list_display = ("id", "name", "team", "state", "priority", "current_step", "budget_steps", "created_at")
    list_filter = ("state", "team")
    search_fields = ("name",)
    inlines = [RunDomainInline]
    readonly_fields = ("state", "created_at", "queued_at", "started_at", "finished_at")


@admin.register(RunDomain)
class RunDomainAdmin(AuditedAdmin):
    list_display = ("run", "domain", "domain_version", "weight")
    raw_id_fields = ("run", "domain", "domain_version")


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "domain", "key", "value", "time")
    list_filter = ("key",)
    raw_id_fields = ("run",)


@admin.register(Trajectory)
class TrajectoryAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "domain", "outcome", "reward")
    list_filter = ("outcome", "domain")
    raw_id_fields = ("run",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "path", "created_at")
    raw_id_fields = ("run",)


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run", "at", "kind", "message")
    list_filter = ("kind",)
    raw_id_fields = ("run",)
