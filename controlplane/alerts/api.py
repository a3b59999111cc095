"""API: alert rules (a team's and the defaults), a test delivery, firings, the delivery log, and
the signed-in user's notifications."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Optional

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts.selectors import team_get
from controlplane.alerts import selectors, services
from controlplane.common.api import ERRORS, MAX_ID, BodyIn, body_doc, json_object

router = Router(tags=["alerts"])


class RuleOut(Schema):
    id: int
    team: Optional[str]
    """Null: a default rule, watching every team's runs."""
    name: str
    condition: str
    metric: str
    threshold: float
    window: int
    events: list[str]
    channels: list[dict[str, Any]]
    """Webhook secrets are never returned: ``secret_set`` says one is stored."""
    advice: str = ""
    """Sent with every firing: what the threshold is, where it comes from and what to try."""
    enabled: bool
    updated_at: datetime


class FiringOut(Schema):
    id: int
    rule: int
    rule_name: str
    run: int
    key: str
    step: int
    value: Optional[float]
    message: str
    url: str
    at: datetime
    resolved_at: Optional[datetime]
    resolved_step: Optional[int]


class DeliveryOut(Schema):
    id: int
    rule: int
    firing: Optional[int]
    channel: str
    target: str
    status: str
    attempts: int
    last_code: Optional[int]
    last_error: str
    log: list[dict[str, Any]]
    created_at: datetime
    sent_at: Optional[datetime]


class NotificationOut(Schema):
    id: int
    message: str
    url: str
    created_at: datetime
    read_at: Optional[datetime]


class NotificationsOut(Schema):
    unread: int
    items: list[NotificationOut]


class ReadIn(BodyIn):
    ids: Optional[list[Annotated[int, Field(ge=1, le=MAX_ID)]]] = Field(None, max_length=1000)
    """The notifications to mark read; omitted: all of them."""


class ReadOut(Schema):
    marked: int
    unread: int


def _firing_out(f) -> dict:
    return {"id": f.id, "rule": f.rule_id, "rule_name": f.rule.name, "run": f.run_id, "key": f.key, "step": f.step,
            "value": f.value, "message": f.message, "url": services.chart_path(f.run, f.step, f.key if f.rule.condition in
                                                                               services.METRIC_CONDITIONS else ""),
            "at": f.at, "resolved_at": f.resolved_at, "resolved_step": f.resolved_step}


def _delivery_out(d, reveal: bool) -> dict:
    return {"id": d.id, "rule": d.rule_id, "firing": d.firing_id, "channel": d.channel,
            "target": services.shown_target(d.channel, d.target, reveal=reveal),
            "status": d.status, "attempts": d.attempts, "last_code": d.last_code,
            "last_error": d.last_error if reveal else ("failed" if d.last_error else ""),
            "log": d.log if reveal else [{k: v for k, v in e.items() if k != "error"} for e in d.log],
            "created_at": d.created_at, "sent_at": d.sent_at}


@router.get("/alerts/rules", response={200: list[RuleOut], **ERRORS})
def rule_list(request: HttpRequest, team: str = ""):
    team_id = team_get(actor=request.auth, slug=team).id if team else None
    return [services.rule_out(r, reveal=services.editable(request.auth, r.team_id))
            for r in selectors.rule_list(actor=request.auth, team_id=team_id)]


@router.post("/alerts/rules", response={201: RuleOut, **ERRORS}, openapi_extra=body_doc(services.RULE_CREATE_SCHEMA))
def rule_create(request: HttpRequest):
    return Status(201, services.rule_out(services.rule_create(actor=request.auth, data=json_object(request)), reveal=True))


@router.get("/alerts/rules/{rule_id}", response={200: RuleOut, **ERRORS})
def rule_get(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_ID)):
    rule = selectors.rule_get(actor=request.auth, rule_id=rule_id)
    return services.rule_out(rule, reveal=services.editable(request.auth, rule.team_id))


@router.patch("/alerts/rules/{rule_id}", response={200: RuleOut, **ERRORS}, openapi_extra=body_doc(services.RULE_UPDATE_SCHEMA))
def rule_update(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_ID)):
    rule = selectors.rule_get(actor=request.auth, rule_id=rule_id)
    return services.rule_out(services.rule_update(actor=request.auth, rule=rule, data=json_object(request)), reveal=True)


@router.delete("/alerts/rules/{rule_id}", response={204: None, **ERRORS})
def rule_delete(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_ID)):
    services.rule_delete(actor=request.auth, rule=selectors.rule_get(actor=request.auth, rule_id=rule_id))
    return Status(204, None)


@router.post("/alerts/rules/{rule_id}/test", response={200: list[DeliveryOut], **ERRORS})
def rule_test(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_ID)):
    """Send a test alert through each of the rule's channels now and answer what each receiver said."""
    rule = selectors.rule_get(actor=request.auth, rule_id=rule_id)
    return [_delivery_out(d, True) for d in services.rule_test_delivery(actor=request.auth, rule=rule)]


@router.get("/alerts/rules/{rule_id}/deliveries", response={200: list[DeliveryOut], **ERRORS})
@paginate
def rule_deliveries(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_ID)):
    rule = selectors.rule_get(actor=request.auth, rule_id=rule_id)
    reveal = services.editable(request.auth, rule.team_id)
    return [_delivery_out(d, reveal) for d in selectors.delivery_list(actor=request.auth, rule=rule)[:1000]]


@router.get("/alerts/firings", response={200: list[FiringOut], **ERRORS})
@paginate
def firing_list(request: HttpRequest, run: Optional[int] = Query(None, ge=1, le=MAX_ID), rule: Optional[int] = Query(None, ge=1, le=MAX_ID)):
    return [_firing_out(f) for f in selectors.firing_list(actor=request.auth, run_id=run, rule_id=rule)[:1000]]


@router.get("/notifications", response={200: NotificationsOut, **ERRORS})
def notification_list(request: HttpRequest, unread: bool = False, limit: int = Query(50, ge=1, le=500)):
    qs = selectors.notifications(actor=request.auth)
    if unread:
        qs = qs.filter(read_at__isnull=True)
    return {"unread": selectors.unread_count(actor=request.auth), "items": list(qs[:limit])}


@router.post("/notifications/read", response={200: ReadOut, **ERRORS})
def notification_read(request: HttpRequest, payload: ReadIn):
    marked = services.notifications_read(actor=request.auth, ids=payload.ids)
    return {"marked": marked, "unread": selectors.unread_count(actor=request.auth)}
