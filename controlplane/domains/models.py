"""Domains (task source + verifier cascade + sandbox + quota) and their immutable versions."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.db.models import Q

from controlplane.accounts.models import Team
from controlplane.common.models import ImmutableVersion


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
    verifier = models.JSONField(default=dict, help_text="The verifier cascade; a code_tests stage's sandbox limits are its params.limits.")
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


class DomainVersion(ImmutableVersion):
    """An immutable snapshot of a domain; runs pin these."""

    immutable_error = "domain versions are immutable: edit the domain to make a new version"

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="versions")
    snapshot = models.JSONField()

    class Meta:
        ordering = ["domain__slug", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "version"], name="domainversion_unique"),
            models.CheckConstraint(condition=Q(version__gte=1), name="domainversion_version_gte_1"),
        ]

    def __str__(self) -> str:
        return f"{self.domain.slug}@v{self.version}"


class AuditStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


AUDIT_OPEN = (AuditStatus.PENDING.value, AuditStatus.RUNNING.value)
AUDIT_FINISHED = (AuditStatus.DONE.value, AuditStatus.FAILED.value)
AUDIT_COUNTS = ("tasks", "probes", "false_positives", "false_negatives_gold", "false_negatives_equivalent", "masked")
"""The report's summary counts, kept as columns (the whole report is kept as JSON beside them)."""


class VerifierAudit(models.Model):
    """One run of the verifier audit (adversarial probes through the real verify path) on one
    immutable domain version. The latest finished audit of a version decides whether runs may pin
    it: a false positive blocks the version until an admin overrides that audit."""

    domain_version = models.ForeignKey(DomainVersion, on_delete=models.CASCADE, related_name="audits")
    status = models.CharField(max_length=16, choices=AuditStatus.choices, default=AuditStatus.PENDING, db_index=True)
    note = models.CharField(max_length=200, blank=True, help_text="Why it was requested (a new version, a re-run, ...).")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    tasks = models.IntegerField(null=True, blank=True)
    probes = models.IntegerField(null=True, blank=True)
    false_positives = models.IntegerField(null=True, blank=True, help_text="Probes that must fail but passed.")
    false_negatives_gold = models.IntegerField(null=True, blank=True, help_text="Gold answers that did not pass.")
    false_negatives_equivalent = models.IntegerField(null=True, blank=True, help_text="Equivalent forms of the gold that did not pass.")
    masked = models.IntegerField(null=True, blank=True, help_text="Probes with an infrastructure outcome (masked).")
    false_positive_classes = models.JSONField(default=list, blank=True, help_text="Probe classes with a false positive (from the report).")
    wall_s = models.FloatField(null=True, blank=True)
    report = models.JSONField(default=dict, blank=True, help_text="The trainer's AuditReport.to_dict().")
    auditor_version = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=[s.value for s in AuditStatus]), name="verifieraudit_status_valid"),
            # Finished exactly when done or failed; a done audit has every count, a failed one says why.
            models.CheckConstraint(condition=Q(status__in=AUDIT_FINISHED, finished_at__isnull=False)
                                   | Q(status__in=AUDIT_OPEN, finished_at__isnull=True), name="verifieraudit_finished_iff_terminal"),
            models.CheckConstraint(condition=~Q(status=AuditStatus.DONE) | Q(**{f"{c}__isnull": False for c in AUDIT_COUNTS}),
                                   name="verifieraudit_done_has_counts"),
            models.CheckConstraint(condition=~Q(status=AuditStatus.FAILED) | ~Q(error=""), name="verifieraudit_failed_has_error"),
            models.CheckConstraint(condition=Q(*[Q(**{f"{c}__isnull": True}) | Q(**{f"{c}__gte": 0}) for c in AUDIT_COUNTS]),
                                   name="verifieraudit_counts_gte_0"),
            models.CheckConstraint(condition=Q(progress_done__gte=0) & Q(progress_total__gte=0), name="verifieraudit_progress_gte_0"),
            # At most one audit of a version waits or runs at a time (a second request joins it).
            models.UniqueConstraint(fields=["domain_version"], condition=Q(status__in=AUDIT_OPEN), name="verifieraudit_one_open_per_version"),
        ]

    def __str__(self) -> str:
        return f"audit {self.pk} of {self.domain_version}"

    @property
    def is_finished(self) -> bool:
        return self.status in AUDIT_FINISHED

    @property
    def is_unsafe(self) -> bool:
        """A finished audit found a probe that must fail passing."""
        return self.status == AuditStatus.DONE and (self.false_positives or 0) > 0

    def start(self) -> bool:
        """Mark running; False when already finished (a second delivery of the task does nothing).
        A running audit starts again: its worker died with it, and an audit is safe to repeat."""
        if self.is_finished:
            return False
        self.status, self.started_at, self.progress_done, self.progress_total = AuditStatus.RUNNING, timezone.now(), 0, 0
        return True

    def terminate(self, status: str) -> None:
        """Finish with ``status`` (done or failed); refuses a status that is not terminal."""
        if status not in AUDIT_FINISHED:
            raise ValueError(f"{status!r} is not a terminal audit status ({', '.join(AUDIT_FINISHED)})")
        self.status, self.finished_at = status, timezone.now()


class VerifierAuditOverride(models.Model):
    """An admin's audited decision that a version may be used although its audit found false
    positives. It covers that one audit: a later audit with false positives needs a new one."""

    audit = models.OneToOneField(VerifierAudit, on_delete=models.CASCADE, related_name="override")
    admin = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    admin_name = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=~Q(reason=""), name="verifierauditoverride_reason_not_empty"),
            models.CheckConstraint(condition=~Q(admin_name=""), name="verifierauditoverride_admin_not_empty"),
        ]

    def __str__(self) -> str:
        return f"override of {self.audit} by {self.admin_name}"
