"""Writes for teams, memberships, API tokens and the audit log."""
from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from controlplane.accounts.models import ApiToken, AuditLog, Membership, Role, Team, token_digest
from controlplane.accounts.principal import ROLE_RANK, Principal
from controlplane.common.errors import FieldError, Forbidden, InvalidInput, NotFound

TOKEN_PREFIX = "tmp_"
MAX_TOKEN_DAYS = 365


def audit_record(
    *,
    actor: Principal,
    obj: Any,
    action: str,
    before: Any = None,
    after: Any = None,
    team: Team | None = None,
) -> AuditLog:
    """Append one audit row. Call inside the transaction that makes the change."""
    return AuditLog.objects.create(
        actor=actor.user if actor.user is not None else None,
        actor_name=actor.name,
        team=team if team is not None else getattr(obj, "team", None),
        object_type=obj._meta.label_lower if hasattr(obj, "_meta") else type(obj).__name__,
        object_id=str(getattr(obj, "pk", "")),
        object_repr=str(obj)[:200],
        action=action,
        before=before,
        after=after,
    )


@transaction.atomic
def team_create(*, slug: str, name: str = "", admin=None) -> Team:
    team = Team(slug=slug, name=name or slug)
    team.full_clean()
    team.save()
    if admin is not None:
        Membership.objects.create(user=admin, team=team, role=Role.ADMIN)
    return team


@transaction.atomic
def membership_set(*, actor: Principal, team: Team, username: str, role: str) -> Membership:
    if not actor.platform_admin:
        actor.require(team.id, "team.admin", "team")
    if role not in ROLE_RANK:
        raise InvalidInput.one("role", "must be one of: " + ", ".join(ROLE_RANK))
    try:
        user = get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise InvalidInput.one("username", f"no user named {username!r}") from None
    membership, _ = Membership.objects.select_for_update().get_or_create(user=user, team=team, defaults={"role": role})
    before = {"role": membership.role}
    membership.role = role
    membership.full_clean()
    membership.save()
    audit_record(actor=actor, obj=membership, action="membership.set", before=before, after={"role": role}, team=team)
    return membership


@transaction.atomic
def token_create(*, actor: Principal, team: Team, name: str, role: str | None = None, expires_in_days: int = 30) -> tuple[ApiToken, str]:
    """Create a token; returns it and its secret, which is shown once and never stored."""
    if actor.token is not None:
        raise Forbidden("tokens cannot create tokens; sign in with a session")
    own_role = actor.require(team.id, "read", "team")
    role = role or own_role
    errors = []
    if role not in ROLE_RANK:
        errors.append(("role", "must be one of: " + ", ".join(ROLE_RANK)))
    elif ROLE_RANK[role] > ROLE_RANK[own_role]:
        errors.append(("role", f"cannot be above your own role '{own_role}'"))
    if not name or not name.strip():
        errors.append(("name", "must not be empty"))
    if not isinstance(expires_in_days, int) or not 1 <= expires_in_days <= MAX_TOKEN_DAYS:
        errors.append(("expires_in_days", f"must be between 1 and {MAX_TOKEN_DAYS}"))
    if errors:
        raise InvalidInput([FieldError(p, m) for p, m in errors])
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user=actor.user,
        team=team,
        role=role,
        name=name.strip()[:100],
        prefix=secret[: len(TOKEN_PREFIX) + 8],
        digest=token_digest(secret),
        created_at=timezone.now(),
        expires_at=timezone.now() + timedelta(days=expires_in_days),
    )
    token.full_clean()
    token.save()
    audit_record(actor=actor, obj=token, action="token.create", after={"name": token.name, "role": role, "expires_at": token.expires_at.isoformat()}, team=team)
    return token, secret


@transaction.atomic
def token_revoke(*, actor: Principal, token_id: int) -> ApiToken:
    token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
    if token is None or token.team_id not in actor.roles:
        raise NotFound("token not found")
    if token.user_id != getattr(actor.user, "pk", None):
        actor.require(token.team_id, "team.admin", "token")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(actor=actor, obj=token, action="token.revoke", team=token.team)
    return token


def token_authenticate(secret: str) -> ApiToken | None:
    """The usable token with this secret, or None (unknown, expired or revoked)."""
    if not secret or not secret.startswith(TOKEN_PREFIX):
        return None
    # With the owner's current role in the token's team (Principal.for_token reads it): one query
    # for every API request instead of two.
    member_role = Membership.objects.filter(user_id=OuterRef("user_id"), team_id=OuterRef("team_id")).values("role")[:1]
    token = (ApiToken.objects.select_related("user", "team").annotate(member_role=Subquery(member_role))
             .filter(digest=token_digest(secret)).first())
    now = timezone.now()
    if token is None or not token.is_usable(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
