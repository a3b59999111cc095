"""Judges and their immutable versions, review queues of sampled judged items, and labels."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.accounts.models import Team
from controlplane.domains.models import Domain


class JudgeKind(models.TextChoices):
    HTTP = "http", "OpenAI-compatible HTTP endpoint"
    LOCAL = "local", "Local model"
    SIMILARITY = "similarity", "Embedding similarity to the reference"


class ScoreFormat(models.TextChoices):
    BINARY = "binary", "Pass / fail"
    ORDINAL = "ordinal", "Ordinal 1-5"
    UNIT = "unit", "Score 0-1"


class Strategy(models.TextChoices):
    UNIFORM = "uniform", "Uniform"
    STRATIFIED = "stratified", "Stratified by judge score"
    DISAGREEMENT = "disagreement", "Disagreement-targeted"
    LOW_CONFIDENCE = "low_confidence", "Low confidence"


class QueueState(models.TextChoices):
    SAMPLING = "sampling", "Sampling"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class Judge(models.Model):
    """A named judge (what verifier stages refer to). Its versions are :class:`JudgeConfig` rows;
    ``active`` is the version runs use, ``previous`` the one a rollback returns to."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="judges")
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    threshold = models.FloatField(default=0.6, help_text="Kappa's interval lower bound must reach this to calibrate.")
    active = models.ForeignKey("JudgeConfig", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    previous = models.ForeignKey("JudgeConfig", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=~Q(slug=""), name="judge_slug_not_empty"),
            models.CheckConstraint(condition=Q(threshold__gte=-1) & Q(threshold__lte=1), name="judge_threshold_kappa_range"),
        ]

    def __str__(self) -> str:
        return self.slug


# What a version is: editing any of these makes a new version.
CONFIG_FIELDS = ("kind", "model", "rubric", "score_format", "endpoint", "api_key_env", "params")
# What may change on a version after it is made: its calibration.
CONFIG_STATE_FIELDS = ("calibrated_at", "calibrated_by", "calibration")


class JudgeConfigQuerySet(models.QuerySet):
    def update(self, **kwargs):
        if set(kwargs) - set(CONFIG_STATE_FIELDS):
            raise TypeError("judge versions are immutable: edit the judge to make a new version")
        return super().update(**kwargs)


class JudgeConfig(models.Model):
    """One immutable version of a judge: rubric, model, score format and call settings."""

    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="versions")
    version = models.IntegerField()
    kind = models.CharField(max_length=16, choices=JudgeKind.choices)
    model = models.CharField(max_length=500, blank=True)
    rubric = models.TextField(blank=True)
    score_format = models.CharField(max_length=16, choices=ScoreFormat.choices)
    endpoint = models.CharField(max_length=100, blank=True, help_text="A name from TEMPER_JUDGE_ENDPOINTS (its URL lives in settings).")
    api_key_env = models.CharField(max_length=100, blank=True, help_text="The environment variable holding the API key; the key is never stored.")
    params = models.JSONField(default=dict, blank=True)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    calibrated_at = models.DateTimeField(null=True, blank=True)
    calibrated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    calibration = models.JSONField(default=dict, blank=True, help_text="The statistics that justified calibration.")

    objects = JudgeConfigQuerySet.as_manager()

    class Meta:
        ordering = ["judge__slug", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["judge", "version"], name="judgeconfig_unique_version"),
            models.CheckConstraint(condition=Q(version__gte=1), name="judgeconfig_version_gte_1"),
            models.CheckConstraint(condition=Q(kind__in=[k.value for k in JudgeKind]), name="judgeconfig_kind_valid"),
            models.CheckConstraint(condition=Q(score_format__in=[f.value for f in ScoreFormat]), name="judgeconfig_format_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.judge.slug}@v{self.version}"

    @property
    def is_calibrated(self) -> bool:
        return self.calibrated_at is not None

    def content(self) -> dict:
        return {name: getattr(self, name) for name in CONFIG_FIELDS}

    def save(self, *args, **kwargs):
        if self.pk is not None:
            fields = kwargs.get("update_fields")
            if fields is None or set(fields) - set(CONFIG_STATE_FIELDS):
                raise TypeError("judge versions are immutable: edit the judge to make a new version")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("judge versions are kept: every reward records the version that produced it")


class ReviewQueue(models.Model):
    """Judged items of one domain and judge version, sampled for human review."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="review_queues")
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="review_queues")
    judge_config = models.ForeignKey(JudgeConfig, on_delete=models.PROTECT, related_name="queues")
    name = models.CharField(max_length=100)
    strategy = models.CharField(max_length=16, choices=Strategy.choices)
    params = models.JSONField(default=dict, blank=True, help_text="size, seed, compare_to, ...")
    reviewers_per_item = models.IntegerField(default=1)
    blind = models.BooleanField(default=True, help_text="Hide the judge's score until the reviewer submits.")
    reservation_s = models.IntegerField(default=600)
    population = models.IntegerField(default=0, help_text="How many judged items the sample was drawn from.")
    state = models.CharField(max_length=10, choices=QueueState.choices, default=QueueState.READY,
                             help_text="sampling: a worker is drawing its items (temper.review.sample); ready: reviewers "
                                       "may label; failed: the sample could not be drawn (error says why).")
    sampling = models.JSONField(default=dict, blank=True, help_text="The worker's progress: {stage, done, total}.")
    error = models.TextField(blank=True, help_text="Why sampling failed: the field and what to change.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "judge_config", "name"], name="reviewqueue_unique_name"),
            models.CheckConstraint(condition=~Q(name=""), name="reviewqueue_name_not_empty"),
            models.CheckConstraint(condition=Q(strategy__in=[s.value for s in Strategy]), name="reviewqueue_strategy_valid"),
            models.CheckConstraint(condition=Q(reviewers_per_item__gte=1) & Q(reviewers_per_item__lte=10), name="reviewqueue_reviewers_1_10"),
            models.CheckConstraint(condition=Q(reservation_s__gte=10), name="reviewqueue_reservation_gte_10"),
            models.CheckConstraint(condition=Q(population__gte=0), name="reviewqueue_population_gte_0"),
            models.CheckConstraint(condition=Q(state__in=[s.value for s in QueueState]), name="reviewqueue_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.domain.slug}, {self.judge_config})"


class ReviewItem(models.Model):
    """One sampled judged completion with the probability that the sampling design chose it."""

    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items")
    trajectory = models.ForeignKey("runs.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    task_id = models.CharField(max_length=200, blank=True)
    prompt = models.TextField()
    completion = models.TextField()
    reference = models.TextField(blank=True)
    judge_score = models.FloatField(help_text="The judge's score on [0, 1].")
    judge_raw = models.FloatField(help_text="The judge's score in its own format.")
    compare_score = models.FloatField(null=True, blank=True, help_text="The rule verifier's or other judge version's score on [0, 1].")
    stratum = models.CharField(max_length=32, blank=True)
    propensity = models.FloatField()
    position = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["queue", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "trajectory"], name="reviewitem_unique_trajectory"),
            models.CheckConstraint(condition=Q(propensity__gt=0) & Q(propensity__lte=1), name="reviewitem_propensity_0_1"),
            models.CheckConstraint(condition=Q(judge_score__gte=0) & Q(judge_score__lte=1), name="reviewitem_judge_score_0_1"),
        ]

    def __str__(self) -> str:
        return f"item {self.pk} of queue {self.queue_id}"


class Reservation(models.Model):
    """A reviewer holds an item until ``expires_at``; expired reservations free the item."""

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="reservations")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="reservation_unique_item_reviewer")]


class Label(models.Model):
    """A reviewer's verdict on an item (in the judge's format; binary and 0-1 judges get pass/fail),
    or a skip with its reason."""

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="labels")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    value = models.FloatField(null=True, blank=True)
    skipped = models.BooleanField(default=False)
    skip_reason = models.CharField(max_length=500, blank=True)
    seconds = models.FloatField(null=True, blank=True, help_text="Time from reservation to submit.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "reviewer"], name="label_unique_item_reviewer"),
            models.CheckConstraint(
                condition=(Q(skipped=True) & Q(value__isnull=True) & ~Q(skip_reason=""))
                | (Q(skipped=False) & Q(value__isnull=False)),
                name="label_value_xor_skip",
            ),
        ]


class ShadowScore(models.Model):
    """A proposed judge version's score on an already labelled item (shadow re-scoring)."""

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="shadow_scores")
    judge_config = models.ForeignKey(JudgeConfig, on_delete=models.CASCADE, related_name="shadow_scores")
    score = models.FloatField(null=True, blank=True)
    raw = models.FloatField(null=True, blank=True)
    outcome = models.CharField(max_length=16)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "judge_config"], name="shadowscore_unique")]
