"""Who is acting, and what their role allows, team by team.

A principal is a user seen through a session (every team they belong to) or through an API token
(only the token's team, at the lower of the token's role and the user's current role). Another
team's objects are invisible: asking for them raises NotFound, never Forbidden.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from controlplane.accounts.models import ApiToken, Membership
from controlplane.common.errors import Forbidden, NotFound

ROLE_RANK = {"viewer": 0, "reviewer": 1, "member": 2, "admin": 3}

CAPABILITIES: dict[str, frozenset[str]] = {
    "read": frozenset({"viewer", "reviewer", "member", "admin"}),
    "run.control": frozenset({"member", "admin"}),
    "label": frozenset({"reviewer", "admin"}),
    "team.admin": frozenset({"admin"}),
}


def lower_role(a: str, b: str) -> str:
    return a if ROLE_RANK[a] <= ROLE_RANK[b] else b


@dataclass(frozen=True)
class Principal:
    """The acting user and their role per team id."""

    user: object
    roles: dict[int, str] = field(default_factory=dict)
    platform_admin: bool = False
    """Django staff: edits the global domain catalogue, resource pools and team quotas."""
    token: ApiToken | None = None

    @classmethod
    def for_user(cls, user) -> "Principal":
        if user is None or not getattr(user, "is_authenticated", False):
            return cls(user=None)
        roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        return cls(user=user, roles=roles, platform_admin=bool(user.is_staff))

    @classmethod
    def for_token(cls, token: ApiToken) -> "Principal":
        if hasattr(token, "member_role"):  # read with the token (token_authenticate)
            member_role = token.member_role
        else:
            member_role = Membership.objects.filter(user_id=token.user_id, team_id=token.team_id).values_list("role", flat=True).first()
        roles = {token.team_id: lower_role(token.role, member_role)} if member_role else {}
        # A token never carries platform rights: those need a session.
        return cls(user=token.user, roles=roles, platform_admin=False, token=token)

    @property
    def is_authenticated(self) -> bool:
        return self.user is not None

    @property
    def name(self) -> str:
        return getattr(self.user, "username", "") or "system"

    @property
    def team_ids(self) -> list[int]:
        return sorted(self.roles)

    def role_in(self, team_id: int | None) -> str | None:
        return self.roles.get(team_id) if team_id is not None else None

    def can(self, team_id: int | None, capability: str) -> bool:
        role = self.role_in(team_id)
        return role is not None and role in CAPABILITIES[capability]

    def require(self, team_id: int, capability: str, what: str = "object") -> str:
        """The role in ``team_id``; NotFound when not a member, Forbidden when the role is too low."""
        role = self.role_in(team_id)
        if role is None:
            raise NotFound(f"{what} not found")
        if role not in CAPABILITIES[capability]:
            allowed = ", ".join(sorted(CAPABILITIES[capability], key=ROLE_RANK.get))
            raise Forbidden(f"your role '{role}' may not do this; it needs one of: {allowed}")
        return role

    def require_platform_admin(self, action: str) -> None:
        if not self.platform_admin:
            raise Forbidden(f"{action} needs a platform admin (a staff user signed in with a session)")


SYSTEM = Principal(user=None, roles={}, platform_admin=True)
"""The principal of scheduler ticks, workers and management commands run by an operator."""
