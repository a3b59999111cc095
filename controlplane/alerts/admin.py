from django.contrib import admin

from controlplane.alerts.models import AlertFiring, AlertRule, Delivery, Notification


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "condition", "metric", "threshold", "window", "enabled")
    list_filter = ("condition", "enabled", "team")


@admin.register(AlertFiring)
class AlertFiringAdmin(admin.ModelAdmin):
    list_display = ("rule", "run", "key", "step", "value", "at", "resolved_at")
    readonly_fields = [f.name for f in AlertFiring._meta.fields]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "channel", "target", "status", "attempts", "last_code", "created_at")
    list_filter = ("status", "channel")
    readonly_fields = [f.name for f in Delivery._meta.fields]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("user", "message", "created_at", "read_at")
