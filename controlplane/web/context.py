"""Template context: the signed-in user's teams, the team they are looking at and their role in it."""
from __future__ import annotations

from django.http import HttpRequest

from controlplane.accounts.selectors import current_team
from controlplane.alerts.selectors import unread_count


def team_context(request: HttpRequest) -> dict:
    team, teams = current_team(request)  # the view's read when it made one; each team carries the role
    return {"current_team": team, "teams": teams, "current_role": team.role if team is not None else "",
            "unread_notifications": unread_count(user=getattr(request, "user", None))}
