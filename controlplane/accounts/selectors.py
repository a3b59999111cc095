"""Reads for teams, tokens and the audit log, filtered to what the principal may see."""
from __future__ import annotations

from django.db.models import QuerySet

from controlplane.accounts.models import ApiToken, AuditLog, Team
from controlplane.accounts.principal import Principal
from controlplane.common.errors import NotFound


def team_list(*, actor: Principal) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=actor.team_ids)


def team_get(*, actor: Principal, slug: str) -> Team:
    """A team the actor belongs to (platform admins see every team)."""
    qs = Team.objects.filter(slug=slug)
    team = (qs if actor.platform_admin else qs.filter(pk__in=actor.team_ids)).first()
    if team is None:
        raise NotFound(f"team {slug!r} not found")
    return team


def token_list(*, actor: Principal) -> QuerySet[ApiToken]:
    """The actor's own tokens, plus every token of the teams they administer."""
    from django.db.models import Q

    admin_teams = [t for t, r in actor.roles.items() if r == "admin"]
    return ApiToken.objects.filter(team_id__in=actor.team_ids).filter(
        Q(user_id=getattr(actor.user, "pk", None)) | Q(team_id__in=admin_teams)
    ).select_related("team", "user")


def audit_list(*, actor: Principal, object_type: str | None = None, object_id: str | None = None) -> QuerySet[AuditLog]:
    """Audit rows of the teams the actor administers (platform admins see every row)."""
    qs = AuditLog.objects.select_related("team")
    if not actor.platform_admin:
        qs = qs.filter(team_id__in=[t for t, r in actor.roles.items() if r == "admin"])
    if object_type:
        qs = qs.filter(object_type=object_type)
    if object_id:
        qs = qs.filter(object_id=object_id)
    return qs
