"""Writes for judges, their versions and calibration, review queues and labels. All audited.

Permissions: a judge belongs to a team; its admins create and edit it, set its threshold,
calibrate, promote and roll back versions and create review queues. Reviewers (and admins) label.
"""
from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import team_get
from controlplane.accounts.services import audit_record
from controlplane.common.errors import Conflict, FieldError, InvalidInput
from controlplane.common.model_refs import ModelRefused, resolve_model
from controlplane.common.validation import SLUG_SCHEMA, TEAM_SCHEMA, validate
from controlplane.review.selectors import config_report
from controlplane.review.models import (
    CONFIG_FIELDS, Judge, JudgeConfig, Label, QueueState, Reservation, ReviewItem, ReviewQueue, ShadowScore, Strategy,
)
from trainer.verifiers.judge import JudgeError, JudgeLimiter, JudgeRequest, JudgeSpec, local_limit
from trainer.verifiers.judges import build_judge

JUDGE_PARAMS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
        "retries": {"type": "integer", "minimum": 0, "maximum": 10},
        "backoff_s": {"type": "number", "minimum": 0, "maximum": 60},
        "max_concurrent": {"type": "integer", "minimum": 1, "maximum": 1024},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 8192},
        "similarity_cut": {"type": "number", "minimum": -1, "maximum": 1},
    },
}
VERSION_PROPERTIES = {
    "kind": {"type": "string", "enum": ["http", "local", "similarity"]},
    "model": {"type": "string", "maxLength": 500},
    "rubric": {"type": "string", "maxLength": 20000},
    "score_format": {"type": "string", "enum": ["binary", "ordinal", "unit"]},
    "endpoint": {"type": "string", "maxLength": 100},
    "api_key_env": {"type": "string", "pattern": r"^([A-Z_][A-Z0-9_]*)?$", "maxLength": 100},
    "params": JUDGE_PARAMS_SCHEMA,
}
JUDGE_CREATE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["team", "slug", "title", "kind", "score_format"],
    "properties": {
        "team": TEAM_SCHEMA,
        "slug": SLUG_SCHEMA,
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "threshold": {"type": "number", "minimum": -1, "maximum": 1},
        "note": {"type": "string", "maxLength": 200},
        **VERSION_PROPERTIES,
    },
}
JUDGE_VERSION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {**VERSION_PROPERTIES, "note": {"type": "string", "maxLength": 200}},
}
QUEUE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["domain", "judge", "name"],
    "properties": {
        "domain": {"type": "string", "minLength": 1},
        "judge": {"type": "string", "minLength": 1},
        "version": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "strategy": {"type": "string", "enum": [s.value for s in Strategy]},
        "size": {"type": "integer", "minimum": 1, "maximum": 10000},
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
        "reviewers_per_item": {"type": "integer", "minimum": 1, "maximum": 10},
        "blind": {"type": "boolean"},
        "reservation_s": {"type": "integer", "minimum": 10, "maximum": 86400},
        "compare_to": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {"rule": {"type": "object"}, "judge_version": {"type": "integer", "minimum": 1}},
        },
    },
}
INFRA_OUTCOMES = ("sandbox_error", "judge_error")


# ----------------------------------------------------------------------------- judges
def endpoint_url(name: str) -> str:
    return settings.TEMPER_JUDGE_ENDPOINTS.get(name, "") if name else ""


SERVER_SECRETS = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND",
                            "EMAIL_HOST_PASSWORD", "PGPASSWORD", "PGPASSFILE"})
"""Variables holding the server's own secrets: never a judge's key, whatever TEMPER_JUDGE_KEY_ENVS says."""
SERVER_PREFIXES = ("DJANGO_", "TEMPER_")
JUDGE_KEY_PREFIX = "TEMPER_JUDGE_KEY_"
"""The one family of TEMPER_ variables that holds judges' keys (the default allow list's prefix)."""
MODEL_KINDS = ("local", "similarity")
"""Judge kinds whose ``model`` is loaded from a directory (a model reference, checked like a run's)."""


def team_key_part(slug: str) -> str:
    """A team's slug as it stands in a variable name: ``{TEAM}`` in TEMPER_JUDGE_KEY_ENVS.

    >>> team_key_part("ml-research")
    'ML_RESEARCH'
    """
    return slug.upper().replace("-", "_")


def allowed_key_envs(team_slug: str | None) -> list[str]:
    """TEMPER_JUDGE_KEY_ENVS for a judge of team ``team_slug``: ``{TEAM}`` becomes that team's
    :func:`team_key_part`; entries with ``{TEAM}`` are left out for a global judge (no team)."""
    out = []
    for entry in settings.TEMPER_JUDGE_KEY_ENVS:
        if "{TEAM}" in entry:
            if team_slug:
                out.append(entry.replace("{TEAM}", team_key_part(team_slug)))
        else:
            out.append(entry)
    return out


def api_key_env_error(name: str, team_slug: str | None = None) -> str | None:
    """Why a judge of team ``team_slug`` may not name ``name`` as the variable holding its key
    (None when it may): it must match TEMPER_JUDGE_KEY_ENVS (exact names, or prefixes ending in
    ``*`` followed by at least one character; ``{TEAM}`` is the judge's team) and never be one of
    the server's own secrets.

    >>> api_key_env_error(""), api_key_env_error("SECRET_KEY") is None, api_key_env_error("TEMPER_SECRET") is None
    (None, False, False)
    >>> api_key_env_error("TEMPER_JUDGE_KEY_") is None, api_key_env_error("TEMPER_JUDGE_KEY_X") is None
    (False, True)
    """
    if not name:
        return None
    allowed = allowed_key_envs(team_slug)
    secret = name in SERVER_SECRETS or (name.startswith(SERVER_PREFIXES) and not name.startswith(JUDGE_KEY_PREFIX))
    if secret or not any(name == a or (a.endswith("*") and name.startswith(a[:-1]) and len(name) >= len(a))
                         for a in allowed):
        return (f"{name!r} is not allowed: a judge's key variable must match TEMPER_JUDGE_KEY_ENVS "
                f"({', '.join(allowed) or 'empty'}), and never a secret of the server")
    return None


def _team_slug(team_id: int | None) -> str | None:
    return Team.objects.filter(pk=team_id).values_list("slug", flat=True).first() if team_id else None


def _version_errors(data: dict, *, kind: str, team_id: int, prefix: str = "") -> list[FieldError]:
    errors = []
    endpoint = data.get("endpoint", "")
    if kind == "http":
        if not endpoint:
            errors.append(FieldError(f"{prefix}endpoint", "required for an http judge: a name from TEMPER_JUDGE_ENDPOINTS"))
        elif endpoint not in settings.TEMPER_JUDGE_ENDPOINTS:
            known = ", ".join(sorted(settings.TEMPER_JUDGE_ENDPOINTS)) or "none configured"
            errors.append(FieldError(f"{prefix}endpoint", f"unknown endpoint {endpoint!r}; known: {known}"))
    if kind == "local" and not data.get("model"):
        errors.append(FieldError(f"{prefix}model", "required for a local judge: a model directory"))
    elif kind in MODEL_KINDS and data.get("model"):
        try:
            resolve_model(data["model"], team_id=team_id)
        except ModelRefused as exc:
            errors.append(FieldError(f"{prefix}model", str(exc)))
    key_error = api_key_env_error(data.get("api_key_env", ""), _team_slug(team_id))
    if key_error:
        errors.append(FieldError(f"{prefix}api_key_env", key_error))
    return errors


def _require_admin(actor: Principal, team_id: int, what: str = "judge") -> None:
    if not actor.platform_admin:
        actor.require(team_id, "team.admin", what)


def judge_spec(config: JudgeConfig):
    """The trainer's JudgeSpec for a version (endpoint URL from settings, key name only).

    The version's model reference and key variable are checked again, as when it was saved (a
    setting may have narrowed since, or a row been written around the service): a local or
    similarity judge's ``model`` becomes the directory it names for the judge's team, and a
    reference or key variable no longer allowed raises :class:`ModelRefused`."""
    params = dict(config.params or {})
    model = config.model
    if config.kind in MODEL_KINDS and model:
        model = resolve_model(model, team_id=config.judge.team_id).path
    key_error = api_key_env_error(config.api_key_env, _team_slug(config.judge.team_id))
    if key_error:
        raise ModelRefused(f"api_key_env {key_error}")
    return JudgeSpec(
        name=config.judge.slug, kind=config.kind, model=model, rubric=config.rubric,
        score_format=config.score_format, endpoint_url=endpoint_url(config.endpoint), api_key_env=config.api_key_env,
        version=config.version, config_id=config.pk, **params,
    )


def judge_build(config: JudgeConfig, limit: JudgeLimiter = local_limit):
    """The built judge of a version; one whose model or key is refused (:func:`judge_spec`) is a
    judge that answers every request with that refusal as a JudgeError (a ``judge_error``)."""
    try:
        return build_judge(judge_spec(config), limit)
    except ModelRefused as exc:
        reason = f"judge {config.judge.slug} v{config.version} is refused: {exc}"

        def refused(request: JudgeRequest):
            raise JudgeError(reason)

        return refused


@transaction.atomic
def judge_create(*, actor: Principal, data: dict) -> Judge:
    validate(data, JUDGE_CREATE_SCHEMA)
    team = team_get(actor=actor, slug=data["team"])
    _require_admin(actor, team.id)
    errors = _version_errors(data, kind=data["kind"], team_id=team.id)
    if Judge.objects.filter(slug=data["slug"]).exists():
        errors.append(FieldError("slug", f"a judge named {data['slug']!r} exists already"))
    if errors:
        raise InvalidInput(errors)
    judge = Judge(team=team, slug=data["slug"], title=data["title"], threshold=data.get("threshold", 0.6))
    judge.full_clean()
    judge.save()
    config = JudgeConfig(judge=judge, version=1, created_by=actor.user, note=data.get("note", "created")[:200],
                         **{k: data.get(k, "" if k != "params" else {}) for k in CONFIG_FIELDS})
    config.full_clean()
    config.save()
    judge.active = config
    judge.save(update_fields=["active", "updated_at"])
    audit_record(actor=actor, obj=judge, action="judge.create", after={"version": 1, **config.content(), "threshold": judge.threshold})
    return judge


@transaction.atomic
def judge_version_create(*, actor: Principal, judge: Judge, changes: dict) -> JudgeConfig:
    """Edit a judge: a new immutable version (proposed, not active) from the latest plus
    ``changes``; nothing is made when nothing changed."""
    _require_admin(actor, judge.team_id)
    validate(changes, JUDGE_VERSION_SCHEMA)
    judge = Judge.objects.select_for_update().get(pk=judge.pk)
    latest = judge.versions.order_by("-version").first()
    content = {**latest.content(), **{k: v for k, v in changes.items() if k != "note"}}
    errors = _version_errors(content, kind=content["kind"], team_id=judge.team_id)
    if errors:
        raise InvalidInput(errors)
    if content == latest.content():
        return latest
    config = JudgeConfig(judge=judge, version=latest.version + 1, created_by=actor.user, **content,
                         note=(changes.get("note") or "changed " + ", ".join(sorted(k for k in content if content[k] != latest.content()[k])))[:200])
    config.full_clean()
    config.save()
    changed = sorted(k for k in CONFIG_FIELDS if content[k] != latest.content()[k])
    audit_record(actor=actor, obj=judge, action="judge.version", before={k: latest.content()[k] for k in changed} | {"version": latest.version},
                 after={k: content[k] for k in changed} | {"version": config.version})
    return config


@transaction.atomic
def judge_set_threshold(*, actor: Principal, judge: Judge, threshold: Any) -> Judge:
    _require_admin(actor, judge.team_id)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1 <= threshold <= 1:
        raise InvalidInput.one("threshold", "must be a number from -1 to 1 (a kappa)")
    before = judge.threshold
    judge.threshold = float(threshold)
    judge.save(update_fields=["threshold", "updated_at"])
    audit_record(actor=actor, obj=judge, action="judge.threshold", before={"threshold": before}, after={"threshold": judge.threshold})
    return judge


def calibration_check(config: JudgeConfig) -> dict:
    """Whether ``config`` may be marked calibrated: kappa's interval lower bound (on its own
    labelled items and its shadow scores) against the judge's threshold."""
    report = config_report(config)
    lower = report["metrics"]["kappa"]["ci"][0] if report["n"] else None
    threshold = config.judge.threshold
    ok = lower is not None and lower >= threshold
    if report["n"] == 0:
        reason = "no labelled items yet"
    elif lower is None:
        reason = "kappa is undefined on the labelled items"
    elif ok:
        reason = f"kappa's lower bound {lower:.3f} clears the threshold {threshold:.3f}"
    else:
        reason = f"kappa's lower bound {lower:.3f} is below the threshold {threshold:.3f}"
    return {"ok": ok, "kappa_lower": lower, "threshold": threshold, "n": report["n"], "reason": reason, "report": report}


def _calibrate(actor: Principal, config: JudgeConfig) -> JudgeConfig:
    check = calibration_check(config)
    if not check["ok"]:
        raise Conflict(f"{config} cannot be marked calibrated: {check['reason']}")
    config.calibrated_at = timezone.now()
    config.calibrated_by = actor.user
    report = check["report"]
    config.calibration = {"n": report["n"], "kappa": report["metrics"]["kappa"], "threshold": check["threshold"],
                          "accuracy": report["metrics"]["accuracy"], "warnings": report["warnings"]}
    config.save(update_fields=["calibrated_at", "calibrated_by", "calibration"])
    audit_record(actor=actor, obj=config.judge, action="judge.calibrate", after={"version": config.version, **config.calibration})
    return config


@transaction.atomic
def judge_calibrate(*, actor: Principal, config: JudgeConfig) -> JudgeConfig:
    """Mark a version calibrated; refused (409) unless kappa's lower bound clears the threshold."""
    _require_admin(actor, config.judge.team_id)
    config = JudgeConfig.objects.select_for_update().select_related("judge").get(pk=config.pk)
    if config.is_calibrated:
        return config
    return _calibrate(actor, config)


@transaction.atomic
def judge_promote(*, actor: Principal, config: JudgeConfig) -> Judge:
    """Make a version the one runs use; it must be (or now become) calibrated. Promoting the
    active version marks it calibrated (the same check)."""
    _require_admin(actor, config.judge.team_id)
    judge = Judge.objects.select_for_update().get(pk=config.judge_id)
    config = JudgeConfig.objects.select_related("judge").get(pk=config.pk)
    if not config.is_calibrated:
        _calibrate(actor, config)
    if judge.active_id == config.pk:
        return judge
    before = judge.active.version if judge.active_id else None
    judge.previous, judge.active = judge.active, config
    judge.save(update_fields=["previous", "active", "updated_at"])
    audit_record(actor=actor, obj=judge, action="judge.promote", before={"active": before}, after={"active": config.version})
    return judge


@transaction.atomic
def judge_rollback(*, actor: Principal, judge: Judge) -> Judge:
    """Return to the version active before the last promotion (one action; audited)."""
    _require_admin(actor, judge.team_id)
    judge = Judge.objects.select_for_update().get(pk=judge.pk)
    if judge.previous_id is None:
        raise Conflict(f"judge {judge.slug!r} has no previous version to roll back to")
    before = judge.active.version if judge.active_id else None
    judge.active, judge.previous = judge.previous, judge.active
    judge.save(update_fields=["previous", "active", "updated_at"])
    audit_record(actor=actor, obj=judge, action="judge.rollback", before={"active": before}, after={"active": judge.active.version})
    return judge


@transaction.atomic
def judge_shadow_start(*, actor: Principal, config: JudgeConfig) -> int:
    """Queue shadow re-scoring of ``config`` on every labelled item of its judge (judge queue).
    Returns how many items will be scored."""
    _require_admin(actor, config.judge.team_id)
    n = shadow_candidates(config).count()
    audit_record(actor=actor, obj=config.judge, action="judge.shadow", after={"version": config.version, "items": n})
    dispatch.send_on_commit("temper.judge.shadow", config.pk)
    return n


def shadow_candidates(config: JudgeConfig):
    """Labelled items of the judge's other versions that ``config`` has not scored yet."""
    return (ReviewItem.objects.filter(queue__judge_config__judge_id=config.judge_id, labels__skipped=False)
            .exclude(queue__judge_config=config).exclude(shadow_scores__judge_config=config).distinct())


def shadow_record(*, config: JudgeConfig, item: ReviewItem, verification: dict) -> ShadowScore:
    """Store one shadow score (a worker calls this; safe to run twice)."""
    details = verification.get("details") or {}
    ok = verification["outcome"] not in INFRA_OUTCOMES and "judge_score" in details
    shadow, _ = ShadowScore.objects.update_or_create(item=item, judge_config=config, defaults={
        "score": details.get("judge_score") if ok else None, "raw": details.get("judge_raw") if ok else None,
        "outcome": verification["outcome"], "error": str(details.get("error", ""))[:2000],
    })
    return shadow


# ----------------------------------------------------------------------------- queues
# Creating and sampling a queue: controlplane/review/queues.py.
def _open_items(queue: ReviewQueue, now):
    """Items that still need labels: fewer labels plus live reservations than the queue wants."""
    return (queue.items.annotate(
        n_labels=Count("labels", filter=Q(labels__skipped=False), distinct=True),
        n_held=Count("reservations", filter=Q(reservations__expires_at__gt=now), distinct=True),
    ).filter(n_labels__lt=queue.reviewers_per_item))


MAX_EXCLUDED = 20
"""Items a ``next`` may be told to pass over: the one on the reviewer's screen and those whose
labels are on their way (the page fetches the next item while the reviewer reads this one)."""


@transaction.atomic
def queue_next(*, actor: Principal, queue: ReviewQueue, exclude: list[int] | tuple[int, ...] = ()) -> ReviewItem | None:
    """Reserve the next item for the actor (their live reservation first), other than the items
    in ``exclude``; None when done."""
    actor.require(queue.team_id, "label", "review queue")
    if queue.state != QueueState.READY:
        raise Conflict(f"queue {queue.name!r} is still being sampled; its items come once a worker has drawn them"
                       if queue.state == QueueState.SAMPLING else f"queue {queue.name!r} could not be sampled: {queue.error}")
    if len(exclude) > MAX_EXCLUDED:
        raise InvalidInput.one("exclude", f"at most {MAX_EXCLUDED} items")
    now = timezone.now()
    user = actor.user
    held = (Reservation.objects.filter(item__queue=queue, reviewer=user, expires_at__gt=now).exclude(item__labels__reviewer=user)
            .exclude(item_id__in=exclude).select_related("item").order_by("item__position", "item_id").first())
    expires = now + timedelta(seconds=queue.reservation_s)
    if held is not None:
        Reservation.objects.filter(pk=held.pk).update(expires_at=expires)
        return held.item
    candidates = (_open_items(queue, now).exclude(labels__reviewer=user).exclude(pk__in=exclude)
                  .filter(Q(n_labels__lt=queue.reviewers_per_item)).order_by("position", "id"))
    for item in candidates[:50]:
        if item.n_labels + item.n_held >= queue.reviewers_per_item:
            continue
        # The item's row only: the model's ordering (by queue) joins the queue's row, and FOR UPDATE
        # would lock it too, so a label being saved in the same queue made every item look taken.
        locked = ReviewItem.objects.select_for_update(skip_locked=True, of=("self",)).filter(pk=item.pk).order_by().first()
        if locked is None:
            continue
        Reservation.objects.filter(item=locked, expires_at__lte=now).delete()
        live = Reservation.objects.filter(item=locked, expires_at__gt=now).exclude(reviewer=user).count()
        labelled = locked.labels.filter(skipped=False).count()
        if live + labelled >= queue.reviewers_per_item:
            continue
        Reservation.objects.update_or_create(item=locked, reviewer=user, defaults={"expires_at": expires})
        return locked
    return None


def _check_value(value: Any, fmt: str) -> float:
    if fmt == "ordinal":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in (1, 2, 3, 4, 5):
            raise InvalidInput.one("value", "must be an integer from 1 to 5")
    elif isinstance(value, bool) or value not in (0, 1):
        raise InvalidInput.one("value", "must be 1 (pass) or 0 (fail)")
    return float(value)


def _take_reservation(actor: Principal, item: ReviewItem) -> Reservation | None:
    """The actor's reservation of the item (even an expired one, if nobody took the item since),
    or a new claim when the item still has room; Conflict when it is full or already labelled."""
    item = ReviewItem.objects.select_for_update(of=("self",)).select_related("queue").get(pk=item.pk)
    if Label.objects.filter(item=item, reviewer=actor.user).exists():
        raise Conflict(f"you have already labelled or skipped item {item.pk}")
    now = timezone.now()
    mine = Reservation.objects.filter(item=item, reviewer=actor.user).first()
    others = Reservation.objects.filter(item=item, expires_at__gt=now).exclude(reviewer=actor.user).count()
    labelled = item.labels.filter(skipped=False).count()
    if labelled >= item.queue.reviewers_per_item or (mine is None and labelled + others >= item.queue.reviewers_per_item):
        raise Conflict(f"item {item.pk} has all the reviewers it needs; take the next one")
    return mine


@transaction.atomic
def label_submit(*, actor: Principal, item: ReviewItem, value: Any, seconds: float | None = None) -> Label:
    """Record a reviewer's label; the judge's score may be shown only after this."""
    queue = item.queue
    actor.require(queue.team_id, "label", "review item")
    value = _check_value(value, queue.judge_config.score_format)
    mine = _take_reservation(actor, item)
    if seconds is None and mine is not None:
        seconds = max(0.0, (timezone.now() - mine.created_at).total_seconds())
    try:
        with transaction.atomic():
            label = Label.objects.create(item=item, reviewer=actor.user, value=value, seconds=seconds)
    except IntegrityError:
        raise Conflict(f"you have already labelled item {item.pk}") from None
    Reservation.objects.filter(item=item, reviewer=actor.user).delete()
    return label


@transaction.atomic
def label_skip(*, actor: Principal, item: ReviewItem, reason: Any) -> Label:
    actor.require(item.queue.team_id, "label", "review item")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput.one("reason", "required: say why you skip the item")
    _take_reservation(actor, item)
    label = Label.objects.create(item=item, reviewer=actor.user, skipped=True, skip_reason=reason.strip()[:500])
    Reservation.objects.filter(item=item, reviewer=actor.user).delete()
    return label


@transaction.atomic
def label_undo(*, actor: Principal, item: ReviewItem) -> ReviewItem:
    """Take back the actor's latest label or skip in the item's queue (a slip of the key): the
    label is deleted, the undo audited with what it was, and the item reserved for the actor
    again. Only the latest one: in a blind queue the judge's score was shown after each submit, and
    going back over earlier labels with that knowledge would bias the agreement."""
    queue = item.queue
    actor.require(queue.team_id, "label", "review item")
    latest = (Label.objects.select_for_update().filter(item__queue=queue, reviewer=actor.user)
              .order_by("-created_at", "-id").first())
    if latest is None or latest.item_id != item.pk:
        raise Conflict(f"only your latest label in this queue can be taken back"
                       + (f" (item {latest.item_id})" if latest is not None else ": you have none"))
    before = {"item": item.pk, "value": latest.value, "skipped": latest.skipped, "skip_reason": latest.skip_reason}
    latest.delete()
    Reservation.objects.update_or_create(item=item, reviewer=actor.user,
                                         defaults={"expires_at": timezone.now() + timedelta(seconds=queue.reservation_s)})
    audit_record(actor=actor, obj=queue, action="review_label.undo", before=before, after={"item": item.pk}, team=queue.team)
    return item


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
