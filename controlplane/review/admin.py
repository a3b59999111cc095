from django.contrib import admin

from controlplane.accounts.admin import AuditedAdmin
from controlplane.common.admin import ReadOnlyAdmin
from controlplane.review.models import Judge, JudgeConfig, Label, ReviewItem, ReviewQueue


@admin.register(Judge)
class JudgeAdmin(AuditedAdmin):
    list_display = ("slug", "title", "team", "threshold", "active", "previous")
    readonly_fields = ("active", "previous")
    search_fields = ("slug", "title")


@admin.register(JudgeConfig)
class JudgeConfigAdmin(ReadOnlyAdmin):
    list_display = ("judge", "version", "kind", "score_format", "model", "calibrated_at", "created_at")
    list_filter = ("kind", "score_format")


@admin.register(ReviewQueue)
class ReviewQueueAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "domain", "judge_config", "strategy", "reviewers_per_item", "population", "created_at")


@admin.register(ReviewItem)
class ReviewItemAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue", "judge_raw", "propensity", "stratum")


@admin.register(Label)
class LabelAdmin(ReadOnlyAdmin):
    list_display = ("id", "item", "reviewer", "value", "skipped", "created_at")
