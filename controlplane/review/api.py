"""API: judges and their versions, calibration and promotion, review queues and labels."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts.selectors import team_get
from controlplane.common.api import ERRORS, MAX_ID, MAX_VERSION, VERSION, BodyIn, body_doc, json_object
from controlplane.common.errors import InvalidInput
from controlplane.review import queues, selectors, services
from controlplane.review.models import Reservation

router = Router(tags=["review"])


class JudgeVersionOut(Schema):
    version: int
    kind: str
    model: str
    rubric: str
    score_format: str
    endpoint: str
    api_key_env: str
    params: dict[str, Any]
    note: str
    created_at: datetime
    created_by: Optional[str] = Field(None, alias="created_by.username")
    calibrated: bool = Field(alias="is_calibrated")
    calibrated_at: Optional[datetime] = None
    calibration: dict[str, Any]


class JudgeOut(Schema):
    slug: str
    title: str
    team: str = Field(alias="team.slug")
    threshold: float
    active_version: Optional[int] = Field(None, alias="active.version")
    previous_version: Optional[int] = Field(None, alias="previous.version")
    active_calibrated: bool
    updated_at: datetime

    @staticmethod
    def resolve_active_calibrated(obj) -> bool:
        return bool(obj.active_id and obj.active.is_calibrated)


class JudgeDetailOut(JudgeOut):
    versions: list[JudgeVersionOut]

    @staticmethod
    def resolve_versions(obj) -> list:
        return list(obj.versions.select_related("created_by").order_by("-version"))


class ThresholdIn(BodyIn):
    threshold: float


class CalibrationCheckOut(Schema):
    version: int
    ok: bool
    kappa_lower: Optional[float] = None
    threshold: float
    n: int
    reason: str
    calibrated: bool
    active: bool
    report: dict[str, Any]


class ShadowOut(Schema):
    version: int
    queued_items: int


class QueueOut(Schema):
    id: int
    name: str
    team: str = Field(alias="team.slug")
    domain: str = Field(alias="domain.slug")
    judge: str = Field(alias="judge_config.judge.slug")
    version: int = Field(alias="judge_config.version")
    score_format: str = Field(alias="judge_config.score_format")
    strategy: str
    params: dict[str, Any]
    reviewers_per_item: int
    blind: bool
    reservation_s: int
    population: int
    state: str
    sampling: dict[str, Any]
    error: str
    created_at: datetime


class QueueDetailOut(QueueOut):
    progress: dict[str, Any]


class ItemOut(Schema):
    """An item as a reviewer sees it: in a blind queue the judge's score is left out until they submit."""

    id: int
    queue: int
    task_id: str
    prompt: str
    completion: str
    reference: str
    score_format: str
    position: int
    judge_score: Optional[float] = None
    judge_raw: Optional[float] = None
    expires_at: Optional[datetime] = None


class NextOut(Schema):
    item: Optional[ItemOut] = None
    progress: dict[str, Any]


class LabelIn(BodyIn):
    value: float
    seconds: Optional[float] = None


class SkipIn(BodyIn):
    reason: str


class LabelOut(Schema):
    item: int
    value: Optional[float] = None
    skipped: bool
    judge_score: float
    judge_raw: float
    agrees: Optional[bool] = None
    stats: dict[str, Any]
    progress: dict[str, Any]


def _item_out(item, *, reveal: bool, expires_at=None) -> dict:
    fmt = item.queue.judge_config.score_format
    return {"id": item.pk, "queue": item.queue_id, "task_id": item.task_id, "prompt": item.prompt, "completion": item.completion,
            "reference": item.reference, "score_format": fmt, "position": item.position,
            "judge_score": item.judge_score if reveal else None, "judge_raw": item.judge_raw if reveal else None,
            "expires_at": expires_at}


JUDGE_CREATE_DOC = body_doc(services.JUDGE_CREATE_SCHEMA)
JUDGE_VERSION_DOC = body_doc(services.JUDGE_VERSION_SCHEMA)
QUEUE_DOC = body_doc({**services.QUEUE_SCHEMA, "properties": {**services.QUEUE_SCHEMA["properties"], "team": {"type": "string"}}})


# ----------------------------------------------------------------------------- judges
@router.get("/judges", response={200: list[JudgeOut], **ERRORS})
@paginate
def judge_list(request: HttpRequest):
    return selectors.judge_list(actor=request.auth)


@router.post("/judges", response={201: JudgeDetailOut, **ERRORS}, openapi_extra=JUDGE_CREATE_DOC)
def judge_create(request: HttpRequest):
    """Create a judge with its first version (active, not yet calibrated)."""
    return Status(201, services.judge_create(actor=request.auth, data=json_object(request)))


@router.get("/judges/{slug}", response={200: JudgeDetailOut, **ERRORS})
def judge_detail(request: HttpRequest, slug: str):
    return selectors.judge_get(actor=request.auth, slug=slug)


@router.post("/judges/{slug}/versions", response={201: JudgeVersionOut, **ERRORS}, openapi_extra=JUDGE_VERSION_DOC)
def judge_version_create(request: HttpRequest, slug: str):
    """Edit the judge: makes a new immutable version (proposed; promote it to use it)."""
    judge = selectors.judge_get(actor=request.auth, slug=slug)
    return Status(201, services.judge_version_create(actor=request.auth, judge=judge, changes=json_object(request)))


@router.post("/judges/{slug}/threshold", response={200: JudgeOut, **ERRORS})
def judge_threshold(request: HttpRequest, slug: str, payload: ThresholdIn):
    judge = selectors.judge_get(actor=request.auth, slug=slug)
    return services.judge_set_threshold(actor=request.auth, judge=judge, threshold=payload.threshold)


def _config(request: HttpRequest, slug: str, version: int):
    """Version ``version`` of the judge ``slug`` (its ``judge`` loaded with it)."""
    return selectors.config_get(judge=selectors.judge_get(actor=request.auth, slug=slug), version=version)


@router.get("/judges/{slug}/versions/{version}/calibration", response={200: CalibrationCheckOut, **ERRORS})
def judge_calibration(request: HttpRequest, slug: str, version: int = VERSION):
    """Statistics of a version against human labels, and whether it may be marked calibrated."""
    config = _config(request, slug, version)
    check = services.calibration_check(config)
    return {"version": config.version, "calibrated": config.is_calibrated, "active": config.judge.active_id == config.pk, **check}


@router.post("/judges/{slug}/versions/{version}/calibrate", response={200: JudgeVersionOut, **ERRORS})
def judge_calibrate(request: HttpRequest, slug: str, version: int = VERSION):
    """Mark calibrated; 409 unless the lower bound of kappa's 95% interval reaches the threshold."""
    return services.judge_calibrate(actor=request.auth, config=_config(request, slug, version))


@router.post("/judges/{slug}/versions/{version}/shadow", response={202: ShadowOut, **ERRORS})
def judge_shadow(request: HttpRequest, slug: str, version: int = VERSION):
    """Re-score the labelled items of the judge's other versions with this version (judge queue)."""
    queued = services.judge_shadow_start(actor=request.auth, config=_config(request, slug, version))
    return Status(202, {"version": version, "queued_items": queued})


@router.post("/judges/{slug}/versions/{version}/promote", response={200: JudgeOut, **ERRORS})
def judge_promote(request: HttpRequest, slug: str, version: int = VERSION):
    """Make this version the one runs use (it must clear the calibration threshold)."""
    return services.judge_promote(actor=request.auth, config=_config(request, slug, version))


@router.post("/judges/{slug}/rollback", response={200: JudgeOut, **ERRORS})
def judge_rollback(request: HttpRequest, slug: str):
    """Return to the version that was active before the last promotion."""
    return services.judge_rollback(actor=request.auth, judge=selectors.judge_get(actor=request.auth, slug=slug))


@router.get("/judges/{slug}/compare", response={200: dict[str, Any], **ERRORS})
def judge_compare(request: HttpRequest, slug: str, a: int = Query(..., ge=1, le=MAX_VERSION), b: int = Query(..., ge=1, le=MAX_VERSION)):
    """Two versions side by side on the labelled items both have scored (own or shadow)."""
    judge = selectors.judge_get(actor=request.auth, slug=slug)
    return selectors.compare(judge=judge, a=selectors.config_get(judge=judge, version=a), b=selectors.config_get(judge=judge, version=b))


# ----------------------------------------------------------------------------- queues and labels
@router.get("/review/queues", response={200: list[QueueOut], **ERRORS})
@paginate
def queue_list(request: HttpRequest, domain: str = "", judge: str = ""):
    return selectors.queue_list(actor=request.auth, domain=domain, judge=judge)


@router.post("/review/queues", response={202: QueueDetailOut, **ERRORS}, openapi_extra=QUEUE_DOC)
def queue_create(request: HttpRequest):
    """Create a review queue of judged trajectories of a domain and judge version: answered at
    once (202, state ``sampling``); a worker draws its items, its ``sampling`` saying how far it
    got, and turns it ``ready`` (or ``failed``, with ``error`` naming the field)."""
    data = json_object(request)
    team_slug = data.pop("team", None)
    if not isinstance(team_slug, str) or not team_slug:
        raise InvalidInput.one("team", "required")
    team = team_get(actor=request.auth, slug=team_slug)
    queue = queues.queue_create(actor=request.auth, team=team, data=data)
    queue.refresh_from_db()  # as it stands now: sampling, unless a worker was quicker
    queue.progress = selectors.queue_progress(queue)
    return Status(202, queue)


@router.get("/review/queues/{queue_id}", response={200: QueueDetailOut, **ERRORS})
def queue_detail(request: HttpRequest, queue_id: int = Path(..., ge=1, le=MAX_ID)):
    queue = selectors.queue_get(actor=request.auth, queue_id=queue_id)
    queue.progress = selectors.queue_progress(queue, request.auth.user)
    return queue


@router.get("/review/queues/{queue_id}/stats", response={200: dict[str, Any], **ERRORS})
def queue_stats(request: HttpRequest, queue_id: int = Path(..., ge=1, le=MAX_ID)):
    """Agreement of the queue's judge version with its reviewers: point values, bootstrap 95%
    intervals, inverse-propensity-weighted estimates, confusion matrix, reliability diagram."""
    return selectors.queue_report(selectors.queue_get(actor=request.auth, queue_id=queue_id))


@router.post("/review/queues/{queue_id}/next", response={200: NextOut, **ERRORS})
def queue_next(request: HttpRequest, queue_id: int = Path(..., ge=1, le=MAX_ID),
               exclude: str = Query("", max_length=400, description="comma-separated item ids to pass over: the one on "
                                    "your screen and those whose labels are on their way (the page fetches ahead)")):
    """Reserve the next item for you (blind: without the judge's score)."""
    queue = selectors.queue_get(actor=request.auth, queue_id=queue_id)
    ids = [x.strip() for x in exclude.split(",") if x.strip()]
    if not all(x.isdigit() and 0 < int(x) <= MAX_ID for x in ids):
        raise InvalidInput.one("exclude", "must be comma-separated item ids")
    item = services.queue_next(actor=request.auth, queue=queue, exclude=[int(x) for x in ids])
    return {"item": _reserved_out(request, item), "progress": selectors.queue_progress(queue, request.auth.user)}


def _reserved_out(request: HttpRequest, item) -> dict | None:
    if item is None:
        return None
    res = Reservation.objects.filter(item=item, reviewer=request.auth.user).first()
    return _item_out(item, reveal=not item.queue.blind, expires_at=res.expires_at if res else None)


@router.get("/review/queues/{queue_id}/history", response={200: list[dict[str, Any]], **ERRORS})
def queue_history(request: HttpRequest, queue_id: int = Path(..., ge=1, le=MAX_ID)):
    """Your latest labels in the queue, newest first, with the judge's score and whether you agree."""
    queue = selectors.queue_get(actor=request.auth, queue_id=queue_id)
    return selectors.queue_history(queue, request.auth.user)


@router.post("/review/items/{item_id}/undo", response={200: NextOut, **ERRORS})
def item_undo(request: HttpRequest, item_id: int = Path(..., ge=1, le=MAX_ID)):
    """Take back your latest label or skip in the item's queue: the item is yours to label again
    (blind again; the undo is audited)."""
    item = services.label_undo(actor=request.auth, item=selectors.item_get(actor=request.auth, item_id=item_id))
    return {"item": _reserved_out(request, item), "progress": selectors.queue_progress(item.queue, request.auth.user)}


def _label_out(request, label) -> dict:
    item = label.item
    queue = item.queue
    report = selectors.queue_report(queue)
    agrees = selectors.label_agrees(item.judge_raw, label.value, queue.judge_config.score_format)
    return {"item": item.pk, "value": label.value, "skipped": label.skipped, "judge_score": item.judge_score,
            "judge_raw": item.judge_raw, "agrees": agrees, "stats": report,
            "progress": selectors.queue_progress(queue, request.auth.user)}


@router.post("/review/items/{item_id}/label", response={201: LabelOut, **ERRORS})
def item_label(request: HttpRequest, payload: LabelIn, item_id: int = Path(..., ge=1, le=MAX_ID)):
    """Submit your label (pass/fail as 1/0, or 1-5); the answer reveals the judge's score and the
    updated statistics."""
    item = selectors.item_get(actor=request.auth, item_id=item_id)
    value: Any = int(payload.value) if float(payload.value).is_integer() else payload.value
    label = services.label_submit(actor=request.auth, item=item, value=value, seconds=payload.seconds)
    return Status(201, _label_out(request, label))


@router.post("/review/items/{item_id}/skip", response={201: LabelOut, **ERRORS})
def item_skip(request: HttpRequest, payload: SkipIn, item_id: int = Path(..., ge=1, le=MAX_ID)):
    """Skip an item, with a reason (it goes to another reviewer)."""
    item = selectors.item_get(actor=request.auth, item_id=item_id)
    return Status(201, _label_out(request, services.label_skip(actor=request.auth, item=item, reason=payload.reason)))
