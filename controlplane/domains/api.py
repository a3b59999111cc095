"""API: the domain registry, its versions and diffs."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts.selectors import team_get
from controlplane.common.api import ERRORS, body_doc, json_object
from controlplane.common.errors import InvalidInput
from controlplane.domains import selectors, services
from controlplane.domains.schemas import DOMAIN_SCHEMA

router = Router(tags=["domains"])


class DomainOut(Schema):
    slug: str
    title: str
    kind: str
    family: str
    description: str
    team: Optional[str] = None
    version: int
    priority: int
    max_concurrent_sandboxes: int
    max_share: float
    task_timeout_s: float
    is_active: bool
    updated_at: datetime

    @staticmethod
    def resolve_team(obj) -> Optional[str]:
        return obj.team.slug if obj.team_id else None


class DomainDetailOut(DomainOut):
    task_source: dict[str, Any]
    verifier: dict[str, Any]
    sandbox: dict[str, Any]


class VersionOut(Schema):
    version: int
    note: str
    created_at: datetime
    created_by: Optional[str] = None
    snapshot: dict[str, Any]

    @staticmethod
    def resolve_created_by(obj) -> Optional[str]:
        return obj.created_by.username if obj.created_by_id else None


class DiffRow(Schema):
    path: str
    before: Any = None
    after: Any = None


class DiffOut(Schema):
    slug: str
    a: int
    b: int
    changes: list[DiffRow]


DOMAIN_CREATE_IN = {
    **DOMAIN_SCHEMA,
    "required": ["slug", "title", "kind", "task_source", "verifier"],
    "properties": {**DOMAIN_SCHEMA["properties"], "team": {"type": "string", "minLength": 1}},
}
DOMAIN_UPDATE_IN = {
    **DOMAIN_SCHEMA,
    "properties": {**DOMAIN_SCHEMA["properties"], "note": {"type": "string", "maxLength": 200}},
}


@router.get("/domains", response={200: list[DomainOut], **ERRORS})
@paginate
def domain_list(request: HttpRequest, q: str = "", kind: str = ""):
    return selectors.domain_list(actor=request.auth, search=q, kind=kind).select_related("team")


@router.post("/domains", response={201: DomainDetailOut, **ERRORS}, openapi_extra=body_doc(DOMAIN_CREATE_IN))
def domain_create(request: HttpRequest):
    data = json_object(request)
    team_slug = data.pop("team", None)
    if team_slug is not None and not isinstance(team_slug, str):
        raise InvalidInput.one("team", "must be a string")
    team = team_get(actor=request.auth, slug=team_slug) if team_slug else None
    return Status(201, services.domain_create(actor=request.auth, data=data, team=team))


DOMAIN_UPLOAD_IN = {
    "type": "object",
    "required": ["team", "slug", "title", "kind", "verifier", "jsonl"],
    "additionalProperties": False,
    "properties": {
        "team": {"type": "string", "minLength": 1},
        "slug": DOMAIN_SCHEMA["properties"]["slug"],
        "title": DOMAIN_SCHEMA["properties"]["title"],
        "kind": DOMAIN_SCHEMA["properties"]["kind"],
        "description": {"type": "string"},
        "verifier": DOMAIN_SCHEMA["properties"]["verifier"],
        "jsonl": {"type": "string", "description": 'One task per line: {"prompt", "answer" | "tests", "metadata"?, "id"?, "level"?}'},
    },
}


@router.post("/domains/upload", response={201: DomainDetailOut, **ERRORS}, openapi_extra=body_doc(DOMAIN_UPLOAD_IN))
def domain_upload(request: HttpRequest):
    """Create a team domain from a JSONL upload; a bad line refuses the whole upload."""
    from controlplane.common.validation import validate

    data = json_object(request)
    validate(data, DOMAIN_UPLOAD_IN)
    team = team_get(actor=request.auth, slug=data.pop("team"))
    jsonl = data.pop("jsonl")
    return Status(201, services.domain_upload_jsonl(actor=request.auth, team=team, data=data, jsonl=jsonl))


@router.get("/domains/{slug}", response={200: DomainDetailOut, **ERRORS})
def domain_detail(request: HttpRequest, slug: str):
    return selectors.domain_get(actor=request.auth, slug=slug)


@router.patch("/domains/{slug}", response={200: DomainDetailOut, **ERRORS}, openapi_extra=body_doc(DOMAIN_UPDATE_IN))
def domain_update(request: HttpRequest, slug: str):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    data = json_object(request)
    note = data.pop("note", "")
    if not isinstance(note, str):
        raise InvalidInput.one("note", "must be a string")
    return services.domain_update(actor=request.auth, domain=domain, changes=data, note=note)


@router.get("/domains/{slug}/versions", response={200: list[VersionOut], **ERRORS})
@paginate
def domain_versions(request: HttpRequest, slug: str):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    return domain.versions.select_related("created_by").order_by("-version")


@router.get("/domains/{slug}/diff", response={200: DiffOut, **ERRORS})
def domain_diff(request: HttpRequest, slug: str, a: int = Query(..., ge=1, le=2**31 - 1), b: int = Query(..., ge=1, le=2**31 - 1)):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    return {"slug": slug, "a": a, "b": b, "changes": selectors.domain_version_diff(domain=domain, a=a, b=b)}
