"""Reads for teams, tokens and the audit log, filtered to what the principal may see; the team a page shows."""
from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http import HttpRequest

from controlplane.accounts.models import ApiToken, AuditLog, Membership, Team
from controlplane.accounts.principal import Principal
from controlplane.common.errors import found


def team_list(*, actor: Principal) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=actor.team_ids)


def team_get(*, actor: Principal, slug: str) -> Team:
    """A team the actor belongs to (platform admins see every team)."""
    qs = Team.objects.filter(slug=slug)
    return found((qs if actor.platform_admin else qs.filter(pk__in=actor.team_ids)).first(), f"team {slug!r} not found")


def current_team(request: HttpRequest) -> tuple[Team | None, list[Team]]:
    """The team a signed-in user looks at (chosen with the page's team switcher, kept in the
    session; else their first team) and all their teams, each with the user's ``role`` in it.

    Read once per request (one query): the page's view and its context processor both ask."""
    known = getattr(request, "_temper_teams", None)
    if known is not None:
        return known
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None, []
    teams = []
    for membership in Membership.objects.filter(user=user).select_related("team").order_by("team__slug"):
        membership.team.role = membership.role
        teams.append(membership.team)
    chosen = request.session.get("team")
    team = next((t for t in teams if t.slug == chosen), teams[0] if teams else None)
    request._temper_teams = (team, teams)
    return team, teams


def token_list(*, actor: Principal) -> QuerySet[ApiToken]:
    """The actor's own tokens, plus every token of the teams they administer."""
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
