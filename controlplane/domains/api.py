"""API: the domain registry, its versions and diffs, and the verifier audit of each version."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts.selectors import team_get
from controlplane.common.api import ERRORS, MAX_VERSION, VERSION, BodyIn, body_doc, json_object, json_object_valid
from controlplane.common.body import read_upload_form
from controlplane.common.errors import InvalidInput
from controlplane.common.validation import TEAM_SCHEMA, validate
from controlplane.domains import selectors, services
from controlplane.domains.schemas import DOMAIN_SCHEMA

router = Router(tags=["domains"])


class AuditSummaryOut(Schema):
    """A version's audit in one word: none, pending, running, failed, clean, unsafe (false
    positives; runs may not pin it) or overridden (an admin allowed it). The latest finished audit
    decides; a pending or failed re-run does not change it (``latest_status`` shows it)."""

    version: int
    state: str
    tone: str
    """The badge's colour: ok (nothing fails), warn (gold answers failing, or a re-audit open),
    unsafe, overridden, failed, waiting (pending or running), none."""
    label: str
    blocks: bool
    overridden: bool
    warning: bool
    rerun_open: bool
    audit_id: Optional[int] = None
    latest_status: Optional[str] = None
    probes: Optional[int] = None
    false_positives: Optional[int] = None
    false_negatives_gold: Optional[int] = None
    classes: list[str]


class DomainOut(Schema):
    slug: str
    title: str
    kind: str
    family: str
    description: str
    team: Optional[str] = Field(None, alias="team.slug")
    version: int
    priority: int
    max_concurrent_sandboxes: int
    max_share: float
    task_timeout_s: float
    is_active: bool
    updated_at: datetime
    audit: AuditSummaryOut

    @staticmethod
    def resolve_audit(obj) -> dict:
        return selectors.domain_audit_summary(obj).as_dict()


class DomainDetailOut(DomainOut):
    task_source: dict[str, Any]
    verifier: dict[str, Any]


class DomainVersionOut(Schema):
    version: int
    note: str
    created_at: datetime
    created_by: Optional[str] = Field(None, alias="created_by.username")
    snapshot: dict[str, Any]


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
    "properties": {**DOMAIN_SCHEMA["properties"], "team": TEAM_SCHEMA},
}
DOMAIN_UPDATE_IN = {
    **DOMAIN_SCHEMA,
    "properties": {**DOMAIN_SCHEMA["properties"], "note": {"type": "string", "maxLength": 200}},
}


@router.get("/domains", response={200: list[DomainOut], **ERRORS})
@paginate
def domain_list(request: HttpRequest, q: str = "", kind: str = ""):
    return selectors.with_audit_summary(selectors.domain_list(actor=request.auth, search=q, kind=kind).select_related("team"))


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
        "team": TEAM_SCHEMA,
        "slug": DOMAIN_SCHEMA["properties"]["slug"],
        "title": DOMAIN_SCHEMA["properties"]["title"],
        "kind": DOMAIN_SCHEMA["properties"]["kind"],
        "description": {"type": "string"},
        "verifier": DOMAIN_SCHEMA["properties"]["verifier"],
        "jsonl": {"type": "string", "description": 'One task per line: {"prompt", "answer" | "tests", "metadata"?, "id"?, "level"?}'},
    },
}


DOMAIN_UPLOAD_FORM = {
    **DOMAIN_UPLOAD_IN,
    "properties": {
        **DOMAIN_UPLOAD_IN["properties"],
        "verifier": {"type": "string", "description": "The verifier cascade, as JSON text"},
        "jsonl": {"type": "string", "format": "binary", "description": "The JSONL file"},
    },
}
DOMAIN_UPLOAD_DOC = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": DOMAIN_UPLOAD_IN},
    "multipart/form-data": {"schema": DOMAIN_UPLOAD_FORM},
}}}


@router.post("/domains/upload", response={201: DomainDetailOut, **ERRORS}, openapi_extra=DOMAIN_UPLOAD_DOC)
def domain_upload(request: HttpRequest):
    """Create a team domain from a JSONL upload; a bad line refuses the whole upload. The body is
    JSON with the lines in ``jsonl``, or a multipart form whose ``jsonl`` part is the file: that
    one is streamed to a temporary file and parsed a line at a time, never held whole."""
    if request.content_type == "multipart/form-data":
        data, jsonl = read_upload_form(request, file_field="jsonl", json_fields=("verifier",))
        validate({**data, "jsonl": ""}, DOMAIN_UPLOAD_IN)
    else:
        data = json_object_valid(request, DOMAIN_UPLOAD_IN)
        jsonl = data.pop("jsonl")
    team = team_get(actor=request.auth, slug=data.pop("team"))
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


@router.get("/domains/{slug}/versions", response={200: list[DomainVersionOut], **ERRORS})
@paginate
def domain_versions(request: HttpRequest, slug: str):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    return domain.versions.select_related("created_by").order_by("-version")


@router.get("/domains/{slug}/diff", response={200: DiffOut, **ERRORS})
def domain_diff(request: HttpRequest, slug: str, a: int = Query(..., ge=1, le=MAX_VERSION), b: int = Query(..., ge=1, le=MAX_VERSION)):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    return {"slug": slug, "a": a, "b": b, "changes": selectors.domain_version_diff(domain=domain, a=a, b=b)}


# ----------------------------------------------------------------------------- the verifier audit
class AuditProgressOut(Schema):
    id: int
    status: str
    note: str
    created_at: datetime
    started_at: Optional[datetime] = None
    done: int = Field(alias="progress_done")
    total: int = Field(alias="progress_total")


class OverrideOut(Schema):
    admin: str = Field(alias="admin_name")
    reason: str
    created_at: datetime


class VerifierAuditOut(AuditProgressOut):
    requested_by: Optional[str] = Field(None, alias="requested_by.username")
    finished_at: Optional[datetime] = None
    tasks: Optional[int] = None
    probes: Optional[int] = None
    false_positives: Optional[int] = None
    false_negatives_gold: Optional[int] = None
    false_negatives_equivalent: Optional[int] = None
    masked: Optional[int] = None
    false_positive_classes: list[str]
    wall_s: Optional[float] = None
    auditor_version: str
    error: str
    report: dict[str, Any]
    override: Optional[OverrideOut] = None

    @staticmethod
    def resolve_override(obj):
        return getattr(obj, "override", None)


class AuditViewOut(Schema):
    """``audit`` is the audit that decides the summary (the latest finished one, else the latest);
    ``open`` is the audit still waiting or running, if any, with its progress."""

    domain: str
    version: int
    summary: AuditSummaryOut
    audit: Optional[VerifierAuditOut] = None
    open: Optional[AuditProgressOut] = None


class AuditRequestIn(BodyIn):
    note: str = "re-run"


class OverrideIn(BodyIn):
    reason: str


def _audit_view(domain, version) -> dict:
    summary = selectors.audit_summary(version=version)
    decisive = selectors.audit_decisive(version=version)
    latest = selectors.audit_latest(version=version)
    shown = decisive or latest
    return {"domain": domain.slug, "version": version.version, "summary": summary.as_dict(), "audit": shown,
            "open": latest if latest is not None and not latest.is_finished else None}


def _version(request: HttpRequest, slug: str, version: int | None):
    domain = selectors.domain_get(actor=request.auth, slug=slug)
    return domain, selectors.domain_version_get(domain=domain, version=domain.version if version is None else version)


@router.get("/domains/{slug}/audit", response={200: AuditViewOut, **ERRORS})
def domain_audit(request: HttpRequest, slug: str):
    """The verifier audit of the domain's current version."""
    return _audit_view(*_version(request, slug, None))


@router.get("/domains/{slug}/versions/{version}/audit", response={200: AuditViewOut, **ERRORS})
def domain_version_audit(request: HttpRequest, slug: str, version: int = VERSION):
    """The verifier audit of one version."""
    return _audit_view(*_version(request, slug, version))


def _rerun(request: HttpRequest, slug: str, version: int | None, body: AuditRequestIn | None):
    domain, dv = _version(request, slug, version)
    services.verifier_audit_request(actor=request.auth, version=dv, note=(body.note if body else "") or "re-run")
    return Status(202, _audit_view(domain, dv))


@router.post("/domains/{slug}/audit", response={202: AuditViewOut, **ERRORS})
def domain_audit_rerun(request: HttpRequest, slug: str, body: Optional[AuditRequestIn] = None):
    """Audit the current version again (admins of the domain); joins an audit already waiting or running."""
    return _rerun(request, slug, None, body)


@router.post("/domains/{slug}/versions/{version}/audit", response={202: AuditViewOut, **ERRORS})
def domain_version_audit_rerun(request: HttpRequest, slug: str, version: int = VERSION, body: Optional[AuditRequestIn] = None):
    """Audit one version again (admins of the domain)."""
    return _rerun(request, slug, version, body)


def _override(request: HttpRequest, slug: str, version: int | None, body: OverrideIn):
    domain, dv = _version(request, slug, version)
    services.verifier_audit_override(actor=request.auth, version=dv, reason=body.reason)
    return Status(201, _audit_view(domain, dv))


@router.post("/domains/{slug}/audit/override", response={201: AuditViewOut, **ERRORS})
def domain_audit_override(request: HttpRequest, slug: str, body: OverrideIn):
    """Let runs pin the current version although its audit found false positives (admins; audited)."""
    return _override(request, slug, None, body)


@router.post("/domains/{slug}/versions/{version}/audit/override", response={201: AuditViewOut, **ERRORS})
def domain_version_audit_override(request: HttpRequest, slug: str, body: OverrideIn, version: int = VERSION):
    """Let runs pin one version although its audit found false positives (admins; audited)."""
    return _override(request, slug, version, body)
