"""Template context: the signed-in user's teams and the team they are looking at."""
from __future__ import annotations

from django.http import HttpRequest


def current_team(request: HttpRequest):
    """The team chosen with the team switcher (kept in the session), else the first one."""
    from controlplane.accounts.models import Team

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None, []
    teams = list(Team.objects.filter(memberships__user=user).order_by("slug"))
    chosen = request.session.get("team")
    team = next((t for t in teams if t.slug == chosen), teams[0] if teams else None)
    return team, teams


def team_context(request: HttpRequest) -> dict:
    team, teams = current_team(request)
    role = ""
    if team is not None:
        from controlplane.accounts.models import Membership

        role = Membership.objects.filter(user=request.user, team=team).values_list("role", flat=True).first() or ""
    return {"current_team": team, "teams": teams, "current_role": role}
