"""Scheduling data: team quotas, resource pools, worker heartbeats and the scheduler's last tick."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from controlplane.accounts.models import Team
from trainer.ceilings import ceiling_map_errors


class TeamQuota(models.Model):
    """How much of the shared pools one team may hold at once, and how large its runs may be."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="quota")
    max_gpus = models.IntegerField(default=1)
    max_concurrent_runs = models.IntegerField(default=2)
    ceilings = models.JSONField(default=dict, blank=True, help_text=(
        "Trainer setting path (rollout.n) or size (sequences_per_step) -> the most this team's runs may use; "
        "each at most the global bound of trainer/config.py. Checked when a run is validated and again by the "
        "worker before it starts the run."))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(max_gpus__gte=0), name="teamquota_gpus_gte_0"),
            models.CheckConstraint(condition=Q(max_concurrent_runs__gte=0), name="teamquota_runs_gte_0"),
        ]

    def clean(self) -> None:
        """Each ceiling names a numeric trainer setting or size and is at most its global bound
        (the admin's form and the quota service both come through here)."""
        errors = ceiling_map_errors(self.ceilings, "ceilings")
        if errors:
            raise ValidationError({"ceilings": [f"{path}: {message}" for path, message in errors]})

    def __str__(self) -> str:
        return f"{self.team.slug}: {self.max_gpus} GPUs, {self.max_concurrent_runs} runs"


class PoolKind(models.TextChoices):
    TRAIN_GPU = "train_gpu", "Train GPU slots"
    ROLLOUT_GPU = "rollout_gpu", "Rollout GPU slots"
    CPU = "cpu", "CPU slots (machines without GPUs)"
    SANDBOX = "sandbox", "Sandbox slots"
    JUDGE = "judge", "Judge tokens (model endpoints: a price only)"


PRICE_UNITS = {PoolKind.TRAIN_GPU: "GPU-hour", PoolKind.CPU: "CPU-hour", PoolKind.SANDBOX: "sandbox-hour",
               PoolKind.JUDGE: "million judge tokens"}
"""What one unit of a pool's ``price`` buys, by kind (controlplane/runs/cost.py prices the usage
figures with them). A rollout_gpu pool has no price: no usage figure counts rollout GPU time apart
from a run's GPUs, which are its train_gpu slots."""


class ResourcePool(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=PoolKind.choices)
    capacity = models.IntegerField(help_text="Slots the scheduler admits runs to (not read for a judge pool: "
                                             "a judge limits its own requests in flight).")
    description = models.CharField(max_length=200, blank=True)
    price = models.DecimalField(max_digits=18, decimal_places=9, null=True, blank=True, help_text=(
        "What one unit costs in the installation's currency (TEMPER_CURRENCY): a GPU-hour (train_gpu), CPU-hour "
        "(cpu), sandbox-hour (sandbox) or million judge tokens (judge); empty: not set, costs show as unknown."))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(capacity__gte=0), name="resourcepool_capacity_gte_0"),
            models.CheckConstraint(condition=Q(price__isnull=True) | Q(price__gte=0), name="resourcepool_price_gte_0"),
            models.CheckConstraint(condition=Q(price__isnull=True) | ~Q(kind="rollout_gpu"), name="resourcepool_rollout_unpriced"),
            models.CheckConstraint(condition=Q(kind__in=[k.value for k in PoolKind]), name="resourcepool_kind_valid"),
        ]

    @property
    def price_unit(self) -> str:
        """What one unit of ``price`` buys ("" for a kind without a price)."""
        return PRICE_UNITS.get(self.kind, "")

    def clean(self) -> None:
        """A price only where a usage figure takes it (:data:`PRICE_UNITS`)."""
        if self.price is not None and self.kind not in PRICE_UNITS:
            raise ValidationError({"price": "no usage figure counts rollout GPU time apart from a run's GPUs (priced by "
                                            "the train_gpu pools): leave it empty"})

    def __str__(self) -> str:
        return f"{self.name} ({self.kind} x{self.capacity})"


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker said it was alive, and what it serves."""

    worker = models.CharField(max_length=200, unique=True)
    queues = models.JSONField(default=list)
    last_seen = models.DateTimeField(db_index=True)
    meta = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["worker"]

    def __str__(self) -> str:
        return self.worker


class SchedulerTick(models.Model):
    """When the scheduler last ran and what it decided: one row (pk 1), overwritten by each tick,
    so /queue/ and the API can tell a scheduler that runs from one that is stuck behind other
    work or has no worker on its queue."""

    at = models.DateTimeField(null=True, blank=True, help_text="When the last tick ended; empty: never.")
    duration_ms = models.FloatField(default=0.0)
    queued = models.IntegerField(default=0)
    admitted = models.IntegerField(default=0)
    preempted = models.IntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        when = f"{self.at:%H:%M:%S}" if self.at else "never"
        return f"scheduler tick at {when}: {self.admitted} admitted, {self.preempted} preempted"
