"""Alert rules, what they fired, where each firing was delivered, and in-app notifications.

A rule belongs to a team (its runs) or to nobody (a default for every run, edited by platform
admins). Its condition is evaluated after every step a run writes and by the alert sweep (stalled
runs, deliveries to retry). ``AlertState`` is what a rule remembers per run and metric key (the
EMA, the best EMA, the last values, whether it is firing), so a rule fires once and stays quiet
until its condition has resolved.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from controlplane.accounts.models import Team
from controlplane.runs.models import Run, RunEvent


class Condition(models.TextChoices):
    DROP = "drop", "EMA falls from its best by at least the threshold"
    ABOVE = "above", "mean over the window above the threshold"
    BELOW = "below", "mean over the window below the threshold"
    STALLED = "stalled", "no step for the threshold in minutes"
    EVENT = "event", "a run event of one of the kinds"


CONDITION_VALUES = [c.value for c in Condition]


class AlertRule(models.Model):
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules",
                             help_text="Empty: a default for every team's runs.")
    name = models.CharField(max_length=200)
    condition = models.CharField(max_length=16, choices=Condition.choices)
    metric = models.CharField(max_length=200, blank=True, help_text="Metric key or glob (reward/*) for drop, above, below.")
    threshold = models.FloatField(default=0.0)
    window = models.IntegerField(default=1, help_text="Steps: the EMA's span (drop) or the mean's window (above, below).")
    events = models.JSONField(default=list, blank=True, help_text="Run event kinds (condition event).")
    channels = models.JSONField(default=list, blank=True, help_text="Where a firing goes: webhook, slack, email, in_app.")
    advice = models.CharField(max_length=2000, blank=True,
                              help_text="What the threshold is, where it comes from and what to try: sent with every firing.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team_id", "name", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(condition__in=CONDITION_VALUES), name="alertrule_condition_valid"),
            models.CheckConstraint(condition=Q(window__gte=1) & Q(window__lte=1000), name="alertrule_window_range"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug if self.team_id else 'default'}: {self.name}"


class AlertState(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="states")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200, help_text="The metric key, 'stalled' or 'events'.")
    firing = models.BooleanField(default=False)
    last_step = models.IntegerField(default=0, help_text="The last step folded into the state.")
    ema = models.FloatField(null=True, blank=True)
    best = models.FloatField(null=True, blank=True)
    points = models.IntegerField(default=0)
    recent = models.JSONField(default=list, blank=True, help_text="The last `window` values (above, below).")
    last_event_id = models.BigIntegerField(default=0, help_text="Events up to this id were looked at (event).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "run", "key"], name="alertstate_unique")]


class AlertFiring(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="firings")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alert_firings")
    key = models.CharField(max_length=200)
    step = models.IntegerField()
    value = models.FloatField(null=True, blank=True)
    message = models.TextField()
    event = models.ForeignKey(RunEvent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_step = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["run", "-at"])]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class Delivery(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    firing = models.ForeignKey(AlertFiring, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries",
                               help_text="Empty for a test delivery.")
    channel = models.CharField(max_length=16)
    target = models.CharField(max_length=2000, help_text="The URL or the addresses (never the secret).")
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING, db_index=True)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_code = models.IntegerField(null=True, blank=True, help_text="The receiver's HTTP status.")
    last_error = models.TextField(blank=True)
    log = models.JSONField(default=list, blank=True, help_text="One entry per attempt: at, code, error, ms.")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class Notification(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    firing = models.ForeignKey(AlertFiring, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    message = models.TextField()
    url = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read_at"])]
