"""Runs, their pinned domains, and what they produce: metrics, trajectories, checkpoints, events."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from controlplane.accounts.models import Team
from controlplane.common.errors import Conflict
from controlplane.domains.models import Domain, DomainVersion
from trainer.config import load_config, whole_number_at
from trainer.config_schema import Setting, config_setting
from trainer.outcomes import OUTCOME_VALUES


class RunState(models.TextChoices):
    DRAFT = "draft", "Draft"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TERMINAL_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})

# draft -> queued -> running <-> paused -> completed | failed | cancelled.
# A paused run is resumed straight to running, or back to queued to wait for capacity (preemption).
TRANSITIONS: dict[str, frozenset[str]] = {
    RunState.DRAFT: frozenset({RunState.QUEUED, RunState.CANCELLED}),
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.CANCELLED, RunState.FAILED}),
    RunState.RUNNING: frozenset({RunState.PAUSED, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED}),
    RunState.PAUSED: frozenset({RunState.RUNNING, RunState.QUEUED, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED}),
    RunState.COMPLETED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
}


class IllegalTransition(Conflict):
    """A state change the run's state machine does not allow."""


def within_bounds(column: str, setting: Setting) -> Q:
    """The condition that ``column`` keeps to the bounds of the trainer ``setting`` it fills."""
    lookups = {"gt": "gt", "ge": "gte", "lt": "lt", "le": "lte"}
    return Q(**{f"{column}__{lookups[op]}": value for op, value in setting.bounds.items()})


STALENESS = config_setting("rollout.staleness")
"""What the run's ``staleness`` fills: its default, help and bounds are the trainer's."""


class Run(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="runs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=200)
    base_model = models.CharField(max_length=500, help_text="A local directory or a model id.")
    config = models.JSONField(default=dict, blank=True, help_text="Trainer config (algorithm, rollout, optimizer, ...).")
    staleness = models.IntegerField(default=STALENESS.default, help_text=STALENESS.help)
    budget_steps = models.IntegerField()
    budget_tokens = models.BigIntegerField(null=True, blank=True)
    budget_seconds = models.FloatField(null=True, blank=True)
    budget_cost = models.DecimalField(max_digits=18, decimal_places=9, null=True, blank=True, help_text=(
        "Money budget in TEMPER_CURRENCY: the run completes at the step where its cost (usage times the pools' prices) "
        "reaches it; empty: no limit."))
    owned = models.JSONField(default=dict, blank=True,
                             help_text="Run fields that fill a trainer setting and have no column of their own, by field.")
    priority = models.IntegerField(default=50)
    initial_priority = models.IntegerField(null=True, blank=True)
    """The priority the run was created with (``priority`` changes mid-run): what a clone starts
    from. None on runs created before it was kept."""
    gpus = models.IntegerField(default=0)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.DRAFT, db_index=True)
    current_step = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    driver = models.CharField(max_length=200, blank=True, help_text="The worker whose driver task owns the run.")
    driver_seen_at = models.DateTimeField(null=True, blank=True, help_text="The driver's last heartbeat.")
    preempt_requested = models.BooleanField(default=False, help_text="Checkpoint, pause and requeue at the next step boundary.")
    tokens_used = models.BigIntegerField(default=0)
    inflight = models.JSONField(default=dict, blank=True, help_text="What the driver is waiting on now, per domain, since when.")
    scheduler_note = models.JSONField(default=dict, blank=True, help_text="Why the run waits: position, binding resource, numbers.")
    placement = models.JSONField(default=dict, blank=True, help_text=(
        "Where the scheduler put a GPU run when it admitted it: {worker, devices} (the worker's device indices, "
        "set as CUDA_VISIBLE_DEVICES for the run's processes); empty for a CPU run."))
    cloned_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="run_name_not_empty"),
            models.CheckConstraint(condition=~Q(base_model=""), name="run_base_model_not_empty"),
            models.CheckConstraint(condition=Q(state__in=[s.value for s in RunState]), name="run_state_valid"),
            models.CheckConstraint(condition=Q(priority__gte=1) & Q(priority__lte=99), name="run_priority_1_99"),
            models.CheckConstraint(condition=Q(gpus__gte=0), name="run_gpus_gte_0"),
            models.CheckConstraint(condition=within_bounds("staleness", STALENESS), name="run_staleness_in_bounds"),
            models.CheckConstraint(condition=Q(budget_steps__gte=1), name="run_budget_steps_gte_1"),
            models.CheckConstraint(condition=Q(budget_tokens__isnull=True) | Q(budget_tokens__gte=1), name="run_budget_tokens_gte_1"),
            models.CheckConstraint(condition=Q(budget_seconds__isnull=True) | Q(budget_seconds__gt=0), name="run_budget_seconds_gt_0"),
            models.CheckConstraint(condition=Q(budget_cost__isnull=True) | Q(budget_cost__gt=0), name="run_budget_cost_gt_0"),
            models.CheckConstraint(condition=Q(current_step__gte=0), name="run_current_step_gte_0"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def _setting(self, path: str) -> int:
        """A positive whole-number trainer setting of the run's config (1 when unset or not one)."""
        value = whole_number_at(self.config, path)
        return value if value is not None and value >= 1 else 1

    @property
    def devices_per_rank(self) -> int:
        """GPUs each rank of a GPU run holds: its vLLM engine's ``rollout.tensor_parallel_size``."""
        return self._setting("rollout.tensor_parallel_size") if self.gpus > 0 else 0

    @property
    def ranks(self) -> int:
        """The processes the run's job runs on: one per group of ``devices_per_rank`` GPUs, else its
        ``config.parallel.ranks``."""
        if self.gpus > 0:
            return max(self.gpus // self.devices_per_rank, 1)
        return self._setting("parallel.ranks")

    @property
    def hosts(self) -> int:
        """The machines its ranks are spread over (``config.parallel.hosts``; checked to divide
        the ranks when it was submitted), ``ranks // hosts`` on each."""
        return self._setting("parallel.hosts")

    @property
    def ranks_per_host(self) -> int:
        """Ranks on each of its hosts (the hosts divide the ranks: checked when it was submitted)."""
        return max(self.ranks // self.hosts, 1)

    @property
    def nodes(self) -> list[dict]:
        """Where its ranks run, one entry per host in node-rank order: ``{"worker", "devices"}``
        from its placement (the scheduler's), the first being the driver's. A run placed on one
        worker has one node; a CPU run left to any worker, none."""
        placement = self.placement or {}
        if placement.get("nodes"):
            return list(placement["nodes"])
        return [{"worker": placement["worker"], "devices": list(placement.get("devices") or [])}] if placement.get("worker") else []

    @property
    def collective_timeout_s(self) -> float:
        """How long its ranks' collectives may wait, a silent rank may go unnamed and a broker
        outage may hold it: ``config.parallel.collective_timeout_s`` (checked when it was
        submitted), else the trainer's default.

        >>> Run(config={"parallel": {"ranks": 2, "collective_timeout_s": 30}}).collective_timeout_s, Run(config={}).collective_timeout_s
        (30.0, 600.0)
        """
        parallel = self.config.get("parallel") if isinstance(self.config, dict) else None
        return float(load_config({"parallel": parallel if isinstance(parallel, dict) else {}}).parallel.collective_timeout_s)

    @property
    def slots(self) -> int:
        """Slots of its pool the run holds while it runs: its GPUs, or one CPU slot per rank and
        tensor-parallel worker of its engine (each bound to cores of its own)."""
        return self.gpus if self.gpus > 0 else self.ranks * self._setting("rollout.tensor_parallel_size")

    def can_transition(self, to: str) -> bool:
        return to in TRANSITIONS[self.state]

    def transition(self, to: str) -> bool:
        """Move to state ``to``; returns False when already there, raises on an illegal move.

        Sets the timestamps that belong to the new state; the caller saves.
        """
        if to not in TRANSITIONS:
            raise IllegalTransition(f"unknown run state {to!r}")
        if self.state == to:
            return False
        if to not in TRANSITIONS[self.state]:
            allowed = ", ".join(sorted(TRANSITIONS[self.state])) or "none (the run has ended)"
            raise IllegalTransition(f"run {self.pk} cannot go from {self.state} to {to}; allowed from {self.state}: {allowed}")
        now = timezone.now()
        self.state = to
        if to == RunState.QUEUED:
            self.queued_at = now
        elif to == RunState.RUNNING and self.started_at is None:
            self.started_at = now
        elif to in TERMINAL_STATES:
            self.finished_at = now
        return True


class RunTag(models.Model):
    """A label a team puts on a run (``baseline``, ``ablation:kl``) to find and group runs; set
    with :func:`controlplane.runs.services.run_set_tags`, which checks the name."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=32)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="runtag_unique_run_name"),
            models.CheckConstraint(condition=~Q(name=""), name="runtag_name_not_empty"),
        ]
        indexes = [models.Index(fields=["name"])]

    def __str__(self) -> str:
        return self.name


class RunDomain(models.Model):
    """A domain in a run's mix, pinned to one version, with its sampling weight."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="run_domains")
    domain = models.ForeignKey(Domain, on_delete=models.PROTECT, related_name="+")
    domain_version = models.ForeignKey(DomainVersion, on_delete=models.PROTECT, related_name="+")
    weight = models.FloatField()
    initial_weight = models.FloatField(null=True, blank=True)
    """The weight the run was created with (``weight`` changes mid-run): what a clone starts from.
    None on runs created before it was kept."""

    class Meta:
        ordering = ["domain__slug"]
        constraints = [
            models.UniqueConstraint(fields=["run", "domain"], name="rundomain_unique"),
            # 0 pauses a domain mid-run (run_set_weights keeps one above 0); a run starts with all above
            models.CheckConstraint(condition=Q(weight__gte=0), name="rundomain_weight_gte_0"),
        ]

    def __str__(self) -> str:
        return f"{self.domain.slug}@v{self.domain_version.version} x{self.weight:g}"


class MetricPoint(models.Model):
    """One value of one metric at one step; the id is the live log's cursor."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    step = models.IntegerField()
    domain = models.CharField(max_length=100, blank=True, default="", help_text="Empty for run-wide metrics.")
    key = models.CharField(max_length=200)
    value = models.FloatField()
    time = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "domain", "key"], name="metricpoint_unique"),
            models.CheckConstraint(condition=Q(step__gte=0), name="metricpoint_step_gte_0"),
            models.CheckConstraint(condition=~Q(key=""), name="metricpoint_key_not_empty"),
        ]
        indexes = [models.Index(fields=["run", "key", "step"]), models.Index(fields=["run", "id"])]


class Trajectory(models.Model):
    """A sampled completion with its verification."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="trajectories")
    step = models.IntegerField()
    domain = models.CharField(max_length=100)
    task_id = models.CharField(max_length=200, blank=True)
    prompt = models.TextField()
    completion = models.TextField()
    reward = models.FloatField(null=True, blank=True, help_text="Empty for masked (infrastructure) outcomes.")
    outcome = models.CharField(max_length=16, choices=[(o, o) for o in OUTCOME_VALUES])
    details = models.JSONField(default=dict, blank=True)
    verifier_version = models.IntegerField(null=True, blank=True)
    judge_version = models.IntegerField(null=True, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    artifacts = models.JSONField(default=list, blank=True, help_text=(
        "Files the verification handed back: [{name, size, truncated, refused, stored}]; the stored "
        "ones' bytes are in the checkpoint store (controlplane/runs/store.py)."))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["step", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(outcome__in=list(OUTCOME_VALUES)), name="trajectory_outcome_valid"),
            models.CheckConstraint(condition=Q(step__gte=0), name="trajectory_step_gte_0"),
        ]
        indexes = [models.Index(fields=["run", "step", "domain"])]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=1000)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique_run_step"),
            models.CheckConstraint(condition=Q(step__gte=0), name="checkpoint_step_gte_0"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step}"


class RunEvent(models.Model):
    """What happened to a run and why (state changes, preemptions, weight changes, quarantines)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["at", "id"]
        constraints = [models.CheckConstraint(condition=~Q(kind=""), name="runevent_kind_not_empty")]


class MetricBucket(models.Model):
    """Min, max and last of one metric over ``width`` consecutive steps, kept as points arrive.

    Long series are drawn from these (at most about a thousand per view), never from a random
    sample, so a spike of one step still shows at every zoom level. See ``runs.series``.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    width = models.IntegerField(help_text="Steps per bucket.")
    bucket = models.IntegerField(help_text="step // width")
    vmin = models.FloatField()
    vmax = models.FloatField()
    vlast = models.FloatField()
    last_step = models.IntegerField()
    last_time = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key", "width", "bucket"], name="metricbucket_unique"),
            models.CheckConstraint(condition=Q(width__gt=1), name="metricbucket_width_gt_1"),
        ]


class UsageRecord(models.Model):
    """What one step of a run consumed, per domain (``domain`` empty: the step's run-level
    figures: trained tokens, wall, CPU and GPU seconds), written by the driver with the step's
    metrics. One row per (run, step, domain, driver): a write retried by the same driver is
    idempotent, while a step done again after a resume is new work and counts again (a rewind
    keeps these rows: the compute was spent). ``team`` and ``at`` make team reports one query."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="usage")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="usage")
    step = models.IntegerField()
    domain = models.CharField(max_length=100, blank=True)
    driver = models.CharField(max_length=200, blank=True)
    at = models.DateTimeField(db_index=True)
    generated_tokens = models.BigIntegerField(default=0)
    trained_tokens = models.BigIntegerField(default=0)
    completions = models.IntegerField(default=0)
    wall_s = models.FloatField(default=0.0)
    cpu_s = models.FloatField(default=0.0)
    gpu_s = models.FloatField(default=0.0)
    sandbox_s = models.FloatField(default=0.0)
    judge_calls = models.IntegerField(default=0)
    judge_tokens = models.BigIntegerField(default=0)
    outcomes = models.JSONField(default=dict, blank=True, help_text="Verification outcome -> count.")

    class Meta:
        ordering = ["run", "step", "domain"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "domain", "driver"], name="usagerecord_unique"),
        ]
        indexes = [models.Index(fields=["team", "at"], name="usagerecord_team_at")]
