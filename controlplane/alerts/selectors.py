"""Reads: the rules, firings and deliveries an actor may see, and a user's notifications."""
from __future__ import annotations

from django.db.models import Q, QuerySet

from controlplane.accounts.principal import Principal
from controlplane.alerts.models import AlertFiring, AlertRule, Delivery, Notification
from controlplane.common.errors import found


def rule_list(*, actor: Principal, team_id: int | None = None) -> QuerySet[AlertRule]:
    """The defaults (every run's) and the rules of the actor's teams (or of ``team_id``)."""
    teams = [team_id] if team_id is not None else actor.team_ids
    qs = AlertRule.objects.select_related("team")
    if actor.platform_admin and team_id is None:
        return qs.order_by("team_id", "name", "id")
    return qs.filter(Q(team__isnull=True) | Q(team_id__in=[t for t in teams if actor.role_in(t) or actor.platform_admin]))


def rule_get(*, actor: Principal, rule_id: int) -> AlertRule:
    rule = AlertRule.objects.select_related("team").filter(pk=rule_id).first()
    visible = rule is not None and (rule.team_id is None or actor.platform_admin or actor.role_in(rule.team_id) is not None)
    return found(rule if visible else None, f"alert rule {rule_id} not found")


def firing_list(*, actor: Principal, run_id: int | None = None, rule_id: int | None = None) -> QuerySet[AlertFiring]:
    qs = AlertFiring.objects.select_related("rule", "run")
    if not actor.platform_admin:
        qs = qs.filter(run__team_id__in=actor.team_ids)
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    if rule_id is not None:
        qs = qs.filter(rule_id=rule_id)
    return qs.order_by("-at", "-id")


def delivery_list(*, actor: Principal, rule: AlertRule) -> QuerySet[Delivery]:
    """A rule's deliveries; for a default rule, only those of the actor's teams' runs (and tests)."""
    qs = Delivery.objects.filter(rule=rule)
    if rule.team_id is None and not actor.platform_admin:
        qs = qs.filter(Q(firing__run__team_id__in=actor.team_ids))
    return qs.order_by("-created_at", "-id")


def notifications(*, actor: Principal) -> QuerySet[Notification]:
    """The actor's notifications about runs of teams it reads now: a token sees its own team's
    only, a member who left a team no longer sees that team's; a session also sees its own
    rule tests (no run)."""
    qs = Notification.objects.filter(user=actor.user, firing__run__team_id__in=actor.team_ids)
    if actor.token is None:
        qs = Notification.objects.filter(user=actor.user).filter(Q(firing__run__team_id__in=actor.team_ids) | Q(firing__isnull=True))
    return qs.order_by("-created_at", "-id")


def unread_count(*, actor: Principal) -> int:
    if actor.user is None:
        return 0
    return notifications(actor=actor).filter(read_at__isnull=True).count()


def firing_keys(*, run) -> set[str]:
    """The metric keys (or event keys) of the rules firing on ``run`` now (not yet resolved)."""
    return set(AlertFiring.objects.filter(run=run, resolved_at__isnull=True).values_list("key", flat=True))
