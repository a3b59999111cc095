"""Template context: the signed-in user's teams, the team they are looking at and their role in it."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.alerts.selectors import unread_count


def team_context(request: HttpRequest) -> dict:
    team, teams = current_team(request)  # the view's read when it made one; each team carries the role
    return {"current_team": team, "teams": teams, "current_role": team.role if team is not None else "",
            "unread_notifications": _unread(request, teams), "can_manage": _can_manage(request, teams),
            "plotly_js": settings.TEMPER_PLOTLY_JS}


def _can_manage(request: HttpRequest, teams) -> bool:
    """The header's "Manage" link: for platform admins and the admins of a team."""
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and (user.is_staff or any(t.role == "admin" for t in teams)))


def _unread(request: HttpRequest, teams) -> int:
    """The header's count: the user's unread notifications about the teams they are in now."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return 0
    return unread_count(actor=Principal(user=user, roles={t.id: t.role for t in teams}, platform_admin=bool(user.is_staff)))
