"""Template context: the signed-in user's teams, the team they are looking at and their role in it."""
from __future__ import annotations

from django.http import HttpRequest

from controlplane.accounts.selectors import current_team, membership_role


def team_context(request: HttpRequest) -> dict:
    team, teams = current_team(request)
    role = membership_role(user=request.user, team=team) if team is not None else ""
    return {"current_team": team, "teams": teams, "current_role": role}
