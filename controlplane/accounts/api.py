"""API: the current principal, teams, tokens and the audit log."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from django.http import HttpRequest
from ninja import Field, Path, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts import selectors, services
from controlplane.common.api import ERRORS, MAX_ID, body_doc, json_object_valid
from controlplane.common.errors import Forbidden
from controlplane.common.validation import TEAM_SCHEMA

router = Router(tags=["accounts"])


class TeamOut(Schema):
    slug: str
    name: str
    role: Optional[str] = None


class MeOut(Schema):
    username: str
    platform_admin: bool
    via_token: bool
    teams: list[TeamOut]


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    team: str
    role: str
    user: str
    created_at: datetime
    expires_at: datetime
    revoked_at: Optional[datetime] = None
    last_used_at: Optional[datetime] = None

    @staticmethod
    def resolve_team(obj) -> str:
        return obj["team"] if isinstance(obj, dict) else obj.team.slug

    @staticmethod
    def resolve_user(obj) -> str:
        return obj["user"] if isinstance(obj, dict) else obj.user.username


class TokenCreatedOut(TokenOut):
    token: str


class AuditOut(Schema):
    id: int
    at: datetime
    actor: str = Field(alias="actor_name")
    team: Optional[str] = Field(None, alias="team.slug")
    object_type: str
    object_id: str
    object_repr: str
    action: str
    before: Any = None
    after: Any = None


def _token_out(t) -> dict:
    return {
        "id": t.id, "name": t.name, "prefix": t.prefix, "team": t.team.slug, "role": t.role,
        "user": t.user.username, "created_at": t.created_at, "expires_at": t.expires_at,
        "revoked_at": t.revoked_at, "last_used_at": t.last_used_at,
    }


@router.get("/me", response={200: MeOut, **ERRORS})
def me(request: HttpRequest):
    actor = request.auth
    teams = selectors.team_list(actor=actor)
    return {
        "username": actor.name,
        "platform_admin": actor.platform_admin,
        "via_token": actor.token is not None,
        "teams": [{"slug": t.slug, "name": t.name, "role": actor.role_in(t.id)} for t in teams],
    }


@router.get("/teams", response={200: list[TeamOut], **ERRORS})
def team_list(request: HttpRequest):
    actor = request.auth
    return [{"slug": t.slug, "name": t.name, "role": actor.role_in(t.id)} for t in selectors.team_list(actor=actor)]


@router.get("/tokens", response={200: list[TokenOut], **ERRORS})
@paginate
def token_list(request: HttpRequest):
    return selectors.token_list(actor=request.auth)


TOKEN_IN = {
    "type": "object",
    "required": ["team", "name"],
    "additionalProperties": False,
    "properties": {
        "team": TEAM_SCHEMA,
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "role": {"type": "string", "enum": ["viewer", "reviewer", "member", "admin"]},
        "expires_in_days": {"type": "integer", "minimum": 1, "maximum": services.MAX_TOKEN_DAYS},
    },
}


@router.post("/tokens", response={201: TokenCreatedOut, **ERRORS}, openapi_extra=body_doc(TOKEN_IN))
def token_create(request: HttpRequest):
    data = json_object_valid(request, TOKEN_IN)
    team = selectors.team_get(actor=request.auth, slug=data["team"])
    token, secret = services.token_create(
        actor=request.auth, team=team, name=data["name"], role=data.get("role"),
        expires_in_days=data.get("expires_in_days", 30),
    )
    return Status(201, {**_token_out(token), "token": secret})


@router.delete("/tokens/{token_id}", response={200: TokenOut, **ERRORS})
def token_revoke(request: HttpRequest, token_id: int = Path(..., ge=1, le=MAX_ID)):
    return _token_out(services.token_revoke(actor=request.auth, token_id=token_id))


@router.get("/audit", response={200: list[AuditOut], **ERRORS})
@paginate
def audit_list(request: HttpRequest, object_type: str = "", object_id: str = ""):
    actor = request.auth
    if not actor.platform_admin and "admin" not in actor.roles.values():
        raise Forbidden("reading the audit log needs the admin role")
    return selectors.audit_list(actor=actor, object_type=object_type, object_id=object_id)
