"""Domains (task source + verifier cascade + sandbox + quota) and their immutable versions."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.accounts.models import Team


class DomainKind(models.TextChoices):
    MATH = "math", "Math"
    CODE = "code", "Code"
    REASONING = "reasoning", "Reasoning"
    DOCUMENT = "document", "Document analysis"
    TOOL_USE = "tool_use", "Tool use"
    TEXT = "text", "Text"
    OTHER = "other", "Other"


KIND_VALUES = [k.value for k in DomainKind]

# The fields a version snapshots, in display order.
VERSIONED_FIELDS = (
    "title",
    "kind",
    "family",
    "description",
    "task_source",
    "verifier",
    "sandbox",
    "max_concurrent_sandboxes",
    "max_share",
    "task_timeout_s",
    "priority",
    "is_active",
)


class Domain(models.Model):
    """A source of tasks with its verifier cascade, sandbox and quota. Edits make a new version."""

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="domains",
                             help_text="Empty for the global catalogue; set for a team's own (uploaded) domains.")
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=DomainKind.choices)
    family = models.CharField(max_length=64, blank=True)
    description = models.TextField(blank=True)
    task_source = models.JSONField(default=dict)
    verifier = models.JSONField(default=dict)
    sandbox = models.JSONField(default=dict, blank=True)
    max_concurrent_sandboxes = models.IntegerField(default=8)
    max_share = models.FloatField(default=1.0, help_text="Largest share of a run's samples this domain may take.")
    task_timeout_s = models.FloatField(default=10.0)
    priority = models.IntegerField(default=50)
    is_active = models.BooleanField(default=True)
    version = models.IntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=~Q(slug=""), name="domain_slug_not_empty"),
            models.CheckConstraint(condition=Q(kind__in=KIND_VALUES), name="domain_kind_valid"),
            models.CheckConstraint(condition=Q(max_concurrent_sandboxes__gte=0), name="domain_sandboxes_gte_0"),
            models.CheckConstraint(condition=Q(max_share__gt=0) & Q(max_share__lte=1), name="domain_max_share_0_1"),
            models.CheckConstraint(condition=Q(task_timeout_s__gt=0), name="domain_task_timeout_gt_0"),
            models.CheckConstraint(condition=Q(priority__gte=1) & Q(priority__lte=99), name="domain_priority_1_99"),
            models.CheckConstraint(condition=Q(version__gte=1), name="domain_version_gte_1"),
        ]

    def __str__(self) -> str:
        return self.slug

    def snapshot(self) -> dict:
        return {name: getattr(self, name) for name in VERSIONED_FIELDS}


class DomainVersionQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("domain versions are immutable")


class DomainVersion(models.Model):
    """An immutable snapshot of a domain; runs pin these."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="versions")
    version = models.IntegerField()
    snapshot = models.JSONField()
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DomainVersionQuerySet.as_manager()

    class Meta:
        ordering = ["domain__slug", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "version"], name="domainversion_unique"),
            models.CheckConstraint(condition=Q(version__gte=1), name="domainversion_version_gte_1"),
        ]

    def __str__(self) -> str:
        return f"{self.domain.slug}@v{self.version}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("domain versions are immutable: edit the domain to make a new version")
        super().save(*args, **kwargs)
