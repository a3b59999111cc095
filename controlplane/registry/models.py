"""Model versions (one per checkpoint, with lineage), aliases that move, versioned eval suites,
and evaluation runs with their per-domain results."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from controlplane.accounts.models import Team
from controlplane.common.models import ImmutableVersion
from controlplane.domains.models import DomainVersion
from controlplane.runs.models import Checkpoint, Run

ALIASES = ("candidate", "canary", "production")
LAYERS = ("capability", "end_to_end")


class ModelVersion(models.Model):
    """A named, immutable model: a team's base model, or one checkpoint of one of its runs.

    Named ``<base>@<run>/<step>`` (``tiny@12/40``); the base model itself is ``<base>``. Lineage:
    base model, run, step, the run's config and its pinned domain versions, and the parent (the
    run's previous checkpoint, or the base for the first one).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="model_versions")
    name = models.CharField(max_length=300)
    kind = models.CharField(max_length=16, choices=[("base", "base model"), ("checkpoint", "checkpoint")], default="checkpoint")
    base = models.CharField(max_length=100, help_text="Short name of the base model (its directory or id).")
    base_model = models.CharField(max_length=500, help_text="The base model's path or id.")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="model_versions")
    checkpoint = models.OneToOneField(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="model_version")
    step = models.IntegerField(default=0)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    path = models.CharField(max_length=1000, help_text="Directory with the weights, config and tokenizer (kept by the registry).")
    config = models.JSONField(default=dict, blank=True, help_text="The run's trainer config.")
    domain_versions = models.ManyToManyField(DomainVersion, blank=True, related_name="+")
    pinned = models.JSONField(default=dict, blank=True, help_text="Pinned domain versions: slug -> version.")
    metrics = models.JSONField(default=dict, blank=True, help_text="Training metrics of the checkpoint's step.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="modelversion_unique_team_name"),
            models.CheckConstraint(condition=~Q(name=""), name="modelversion_name_not_empty"),
            models.CheckConstraint(condition=Q(step__gte=0), name="modelversion_step_gte_0"),
            models.CheckConstraint(condition=Q(kind__in=["base", "checkpoint"]), name="modelversion_kind_valid"),
            models.CheckConstraint(condition=~Q(kind="base") | (Q(run__isnull=True) & Q(step=0)), name="modelversion_base_has_no_run"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_base(self) -> bool:
        return self.kind == "base"


class BaseModel(models.Model):
    """A base model a platform admin registered for every team: runs, judges and references name
    it ``base:<name>`` (controlplane/common/model_refs.py). Registering is the admin's allow
    decision for that one directory: it need not lie under ``TEMPER_MODEL_DIRS``, but never in the
    server's storage (teams' checkpoints, registry copies, exports)."""

    name = models.SlugField(max_length=100, unique=True)
    path = models.CharField(max_length=1000, help_text="The model's directory, symlinks resolved when registered.")
    description = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Alias(models.Model):
    """``candidate``, ``canary`` or ``production`` of one team's model line (one base)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="model_aliases")
    base = models.CharField(max_length=100)
    name = models.CharField(max_length=16, choices=[(a, a) for a in ALIASES])
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="aliases")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "base", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "base", "name"], name="alias_unique_team_base_name"),
            models.CheckConstraint(condition=Q(name__in=list(ALIASES)), name="alias_name_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.base}:{self.name} -> {self.version.name}"


class AliasMove(models.Model):
    """Every move of an alias (the history rollback reads), besides the audit log."""

    alias = models.ForeignKey(Alias, on_delete=models.CASCADE, related_name="moves")
    from_version = models.ForeignKey(ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    to_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="alias_moves")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=16, default="move", help_text="move, override or rollback")
    reason = models.TextField(blank=True)
    gate = models.JSONField(default=dict, blank=True, help_text="The promotion gate's verdict at the time.")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]


class EvalSuite(models.Model):
    """A named evaluation suite; its contents live in immutable versions."""

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="eval_suites",
                             help_text="Empty for suites every team may use.")
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200, blank=True)
    version = models.IntegerField(default=1)
    auto_evaluate = models.BooleanField(default=False, help_text="Evaluate every new model version of the team(s) on this suite.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [models.CheckConstraint(condition=Q(version__gte=1), name="evalsuite_version_gte_1")]

    def __str__(self) -> str:
        return self.slug


class EvalSuiteVersion(ImmutableVersion):
    """Immutable items of a suite: per domain (pinned version) and layer, tasks, seed, decoding."""

    immutable_error = "eval suite versions are immutable: edit the suite to make a new version"

    suite = models.ForeignKey(EvalSuite, on_delete=models.CASCADE, related_name="versions")
    items = models.JSONField()

    class Meta:
        ordering = ["suite__slug", "-version"]
        constraints = [models.UniqueConstraint(fields=["suite", "version"], name="evalsuiteversion_unique")]

    def __str__(self) -> str:
        return f"{self.suite.slug}@v{self.version}"


class EvalState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


class EvalRun(models.Model):
    """One evaluation of one model version on one suite version (a Celery job on the eval queue)."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="eval_runs")
    suite_version = models.ForeignKey(EvalSuiteVersion, on_delete=models.PROTECT, related_name="eval_runs")
    engine = models.CharField(max_length=16, default="torch")
    state = models.CharField(max_length=16, choices=EvalState.choices, default=EvalState.QUEUED, db_index=True)
    worker = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    held = models.CharField(max_length=2000, blank=True, help_text=(
        "Why a queued evaluation is not sent to the eval queue yet: the verifier audits of the suite's domain "
        "versions have not cleared them (audits gate every use). Empty once it is sent."))
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=[s.value for s in EvalState]), name="evalrun_state_valid"),
            models.CheckConstraint(condition=Q(engine__in=["torch", "vllm"]), name="evalrun_engine_valid"),
        ]

    def __str__(self) -> str:
        return f"eval {self.pk}: {self.version_id} on {self.suite_version_id}"


class EvalResult(models.Model):
    """One domain and layer of an evaluation: pass@k, mean reward, outcomes, cost, per-task scores."""

    eval_run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    domain = models.CharField(max_length=100)
    domain_version = models.IntegerField()
    layer = models.CharField(max_length=16, choices=[(x, x) for x in LAYERS])
    tasks = models.IntegerField()
    samples = models.IntegerField()
    pass_at = models.JSONField(default=dict, help_text="k -> pass@k")
    mean_reward = models.FloatField(null=True, blank=True)
    outcomes = models.JSONField(default=dict)
    tokens_per_task = models.FloatField(default=0.0)
    seconds_per_task = models.FloatField(default=0.0)
    per_task = models.JSONField(default=list, help_text="task_id, rewards, outcomes, tokens, seconds, completion")

    class Meta:
        ordering = ["layer", "domain"]
        constraints = [
            models.UniqueConstraint(fields=["eval_run", "domain", "layer"], name="evalresult_unique"),
            models.CheckConstraint(condition=Q(layer__in=list(LAYERS)), name="evalresult_layer_valid"),
            models.CheckConstraint(condition=Q(tasks__gte=0) & Q(samples__gte=0), name="evalresult_counts_gte_0"),
        ]
