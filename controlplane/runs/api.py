"""API: validate, create, control and read runs, with their metrics after a cursor."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Optional

from django.http import HttpRequest, HttpResponse
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.pagination import paginate
from ninja.responses import NinjaJSONEncoder

from controlplane.common import yaml_text
from controlplane.common.api import ERRORS, MAX_ID, body_doc, json_body, json_object_valid
from controlplane.common.errors import InvalidInput
from controlplane.domains.selectors import domain_get
from controlplane.accounts.selectors import team_get
from controlplane.runs import forecast, selectors, series, services, usage
from controlplane.runs.cost import amount_text
from controlplane.runs.schemas import run_body_schema
from controlplane.runs.spec import RunSpec

router = Router(tags=["runs"])


class RunDomainOut(Schema):
    slug: str
    version: int
    weight: float


class RunOut(Schema):
    id: int
    team: str = Field(alias="team.slug")
    name: str
    state: str
    base_model: str
    priority: int
    gpus: int
    staleness: int
    budget_steps: int
    budget_tokens: Optional[int] = None
    budget_seconds: Optional[float] = None
    budget_cost: Optional[str] = None
    """The money budget in TEMPER_CURRENCY (a decimal string, as exact as it was given); null: none."""
    current_step: int
    created_by: Optional[str] = Field(None, alias="created_by.username")
    created_at: datetime
    queued_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    error: str
    tags: list[str] = []
    owned_fields: dict[str, Any] = {}
    """The run fields that fill trainer settings, as the run body has them (``staleness``,
    ``budget.steps``): every one the trainer's run-owned list names, a new one included."""

    @staticmethod
    def resolve_tags(obj) -> list[str]:
        return [t.name for t in obj.tags.all()]  # prefetched by the list

    @staticmethod
    def resolve_budget_cost(obj) -> str | None:
        return amount_text(obj.budget_cost)

    @staticmethod
    def resolve_owned_fields(obj) -> dict[str, Any]:
        return RunSpec.from_run(obj, []).body()


class RunDetailOut(RunOut):
    config: dict[str, Any]
    domains: list[RunDomainOut]
    warnings: list[str] = []

    @staticmethod
    def resolve_warnings(obj) -> list[str]:
        """E.g. a judge one of its domains uses is not calibrated."""
        return selectors.run_warnings(run=obj)

    @staticmethod
    def resolve_domains(obj) -> list[dict]:
        return [
            {"slug": rd.domain.slug, "version": rd.domain_version.version, "weight": rd.weight}
            for rd in obj.run_domains.select_related("domain", "domain_version")
        ]


class PlanDomainOut(Schema):
    slug: str
    version: int
    weight: float
    share: float


class ValidateOut(Schema):
    valid: bool
    team: str
    domains: list[PlanDomainOut]


class MetricOut(Schema):
    id: int
    step: int
    domain: str
    key: str
    value: float
    time: datetime


class MetricsPage(Schema):
    items: list[MetricOut]
    next_cursor: int


class EventOut(Schema):
    id: int
    at: datetime
    kind: str
    message: str
    data: dict[str, Any]


PRIORITY_IN = {
    "type": "object", "required": ["priority"], "additionalProperties": False,
    "properties": {"priority": {"type": "integer", "minimum": 1, "maximum": 99}},
}
TAGS_IN = {
    "type": "object", "required": ["tags"], "additionalProperties": False,
    "properties": {"tags": {"type": "array", "maxItems": 100, "description": "The run's tags (replaces them; [] removes all): "
                            "lower-case letters, digits and . _ : -, at most 32 characters each, at most 20.",
                            "items": {"type": "string", "maxLength": 100}}},
}
WEIGHTS_IN = {
    "type": "object", "required": ["weights"], "additionalProperties": False,
    "properties": {"weights": {"type": "object", "minProperties": 1,
                               # 0 pauses a domain (run_set_weights keeps one above 0)
                               "additionalProperties": {"type": "number", "minimum": 0}}},
}


RUN_BODY = body_doc(run_body_schema())
"""The documented run body: its config section is the trainer's settings less those the run owns."""


@router.post("/runs/validate", response={200: ValidateOut, **ERRORS}, openapi_extra=RUN_BODY)
def run_validate(request: HttpRequest):
    plan = services.run_validate(actor=request.auth, data=json_body(request))
    as_dict = plan.as_dict()
    return {"valid": True, "team": as_dict["team"], "domains": as_dict["domains"]}


YAML_PARSE_IN = {
    "type": "object", "required": ["text"], "additionalProperties": False,
    "properties": {"text": {"type": "string", "maxLength": yaml_text.MAX_TEXT,
                            "description": "A run body as YAML (JSON's values only: no aliases, tags or non-finite numbers)."}},
}
YAML_DUMP_IN = {
    "type": "object", "required": ["body"], "additionalProperties": False,
    "properties": {"body": {"type": "object", "description": "A run body, as POST /api/runs takes it."}},
}


class YamlParseOut(Schema):
    body: dict[str, Any]


class YamlDumpOut(Schema):
    text: str


@router.post("/runs/yaml/parse", response={200: YamlParseOut, **ERRORS}, openapi_extra=body_doc(YAML_PARSE_IN))
def run_yaml_parse(request: HttpRequest):
    """A run body written as YAML, read into the JSON the other run endpoints take (the run form's
    YAML view); what is not JSON-like YAML is refused at ``text`` with its line and column. Nothing
    is validated as a run here: /api/runs/validate does that."""
    data = json_object_valid(request, YAML_PARSE_IN)
    try:
        body = yaml_text.loads(data["text"])
    except yaml_text.YamlTextError as exc:
        raise InvalidInput.one("text", f"not YAML this page can read: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInput.one("text", "must be a mapping (name: ..., domains: ..., config: ...), not "
                               + ("empty" if body is None else f"a {type(body).__name__}"))
    return {"body": body}


@router.post("/runs/yaml/dump", response={200: YamlDumpOut, **ERRORS}, openapi_extra=body_doc(YAML_DUMP_IN))
def run_yaml_dump(request: HttpRequest):
    """A run body as block YAML, keys in their order (the run form's YAML view)."""
    return {"text": yaml_text.dumps(json_object_valid(request, YAML_DUMP_IN)["body"])}


@router.post("/runs", response={201: RunDetailOut, **ERRORS}, openapi_extra=RUN_BODY)
def run_create(request: HttpRequest):
    return Status(201, services.run_create(actor=request.auth, data=json_body(request)))


@router.get("/runs", response={200: list[RunOut], **ERRORS})
@paginate
def run_list(request: HttpRequest, state: str = "", team: str = "", tag: str = Query("", max_length=100)):
    return selectors.run_list(actor=request.auth, state=state, team=team, tag=tag)


@router.get("/runs/{run_id}", response={200: RunDetailOut, **ERRORS})
def run_detail(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    return selectors.run_get(actor=request.auth, run_id=run_id)


def _control(action):
    def view(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
        run = selectors.run_get(actor=request.auth, run_id=run_id)
        return action(actor=request.auth, run=run)

    return view


for _name, _action in (("start", services.run_start), ("pause", services.run_pause),
                       ("resume", services.run_resume), ("cancel", services.run_cancel)):
    _view = _control(_action)
    _view.__name__ = f"run_{_name}"
    router.post(f"/runs/{{run_id}}/{_name}", response={200: RunOut, **ERRORS}, operation_id=f"run_{_name}",
                summary=f"{_name.capitalize()} a run")(_view)


@router.post("/runs/{run_id}/priority", response={200: RunOut, **ERRORS}, openapi_extra=body_doc(PRIORITY_IN))
def run_priority(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    data = json_object_valid(request, PRIORITY_IN)  # the documented body is the accepted one (unknown keys refused)
    return services.run_set_priority(actor=request.auth, run=run, priority=data["priority"])


@router.post("/runs/{run_id}/tags", response={200: RunOut, **ERRORS}, openapi_extra=body_doc(TAGS_IN))
def run_tags(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    """Replace a run's tags (members and admins)."""
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    data = json_object_valid(request, TAGS_IN)
    return services.run_set_tags(actor=request.auth, run=run, tags=data["tags"])


@router.post("/runs/{run_id}/weights", response={200: RunDetailOut, **ERRORS}, openapi_extra=body_doc(WEIGHTS_IN))
def run_weights(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    data = json_object_valid(request, WEIGHTS_IN)
    return services.run_set_weights(actor=request.auth, run=run, weights=data.get("weights"))


class QueuedOut(Schema):
    position: Optional[int] = None
    binding: Optional[str] = None
    reason: str
    used: Optional[int] = None
    limit: Optional[int] = None


class InFlightOut(Schema):
    domain: str
    items: int


class RunningOut(Schema):
    driver: Optional[str] = None
    driver_seen_s_ago: Optional[float] = None
    phase: str
    phase_age_s: Optional[float] = None
    in_flight: list[InFlightOut]
    preempt_requested: bool


class PausedOut(Schema):
    binding: Optional[str] = None
    reason: str
    resume_when_served: Optional[str] = None
    """The queue whose live worker resumes the run by itself (paused for want of one)."""


class ExplainOut(Schema):
    state: str
    step: int
    queued: Optional[QueuedOut] = None
    running: Optional[RunningOut] = None
    paused: Optional[PausedOut] = None


@router.get("/runs/{run_id}/explain", response={200: ExplainOut, **ERRORS})
def run_explain(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    """Why is this run pending, or what is it waiting on?"""
    return selectors.run_explain(run=selectors.run_get(actor=request.auth, run_id=run_id))


@router.get("/runs/{run_id}/metrics", response={200: MetricsPage, **ERRORS})
def run_metrics(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID), after: int = Query(0, ge=0, le=MAX_ID), limit: int = Query(1000, ge=1, le=5000), key: str = ""):
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    keys = [k for k in key.split(",") if k] if key else None
    points, cursor = selectors.metrics_after(run=run, cursor=after, limit=limit, keys=keys)
    # Rows with the schema's fields, encoded as ninja would (NinjaJSONEncoder: ISO times); a page
    # is up to 5000 points, written out directly rather than validated one by one.
    return HttpResponse(json.dumps({"items": points, "next_cursor": cursor}, cls=NinjaJSONEncoder, separators=(",", ":")),
                        content_type="application/json")


@router.get("/runs/{run_id}/events", response={200: list[EventOut], **ERRORS})
@paginate
def run_events(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    return selectors.event_list(run=run)


class SeriesValues(Schema):
    step: list[int]
    time: list[int]
    min: list[float]
    max: list[float]
    last: list[float]


class SeriesOut(Schema):
    width: int
    lo: int
    hi: int
    cursor: int
    series: dict[str, SeriesValues]


@router.get("/runs/{run_id}/keys", response={200: list[str], **ERRORS})
def run_metric_keys(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    """Every metric key the run has written."""
    return series.run_keys(run=selectors.run_get(actor=request.auth, run_id=run_id))


@router.get("/runs/{run_id}/series", response={200: SeriesOut, **ERRORS})
def run_series(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID), key: str = "", prefix: str = "",
               lo: Optional[int] = Query(None, ge=0, le=series.MAX_STEP), hi: Optional[int] = Query(None, ge=0, le=series.MAX_STEP),
               max_points: int = Query(series.MAX_POINTS, ge=10, le=5000)):
    """Metric series over the steps ``lo..hi`` as min/max/last buckets (raw points when the range
    is short). ``key`` is a comma-separated list of keys; ``prefix`` adds every key that starts with it.
    ``cursor`` is where to follow the live socket from."""
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    wanted = [k for k in key.split(",") if k]
    if prefix:
        wanted += [k for k in series.run_keys(run=run) if k.startswith(prefix)]
        if not wanted:
            return {"width": 1, "lo": lo or 0, "hi": hi or 0, "cursor": series.series_cursor(run=run), "series": {}}
    view = series.series(run=run, keys=wanted, lo=lo, hi=hi, max_points=max_points)
    # Built by series() to the schema above, with plain ints and floats; a long view is hundreds of
    # thousands of numbers, which are written out directly rather than validated one by one.
    return HttpResponse(json.dumps(view, separators=(",", ":")), content_type="application/json")


class DomainOutcomeOut(Schema):
    outcome: str
    count: int
    share: float


class DomainStatsOut(Schema):
    p50_s: Optional[float] = None
    p99_s: Optional[float] = None
    total: int
    window_minutes: int
    outcomes: list[DomainOutcomeOut]
    runs: int


@router.get("/domains/{slug}/stats", response={200: DomainStatsOut, **ERRORS}, tags=["domains"])
def domain_stats(request: HttpRequest, slug: str):
    """Verification latency (p50, p99) and outcome mix of a domain over the last hour, across the
    runs of your teams."""
    return selectors.domain_stats(actor=request.auth, domain=domain_get(actor=request.auth, slug=slug))


# ----------------------------------------------------------------------------- usage
class UsageFigures(Schema):
    generated_tokens: int
    trained_tokens: int
    completions: int
    wall_s: float
    cpu_s: float
    gpu_s: float
    sandbox_s: float
    judge_calls: int
    judge_tokens: int
    verifications: int
    outcomes: dict[str, int]


class PerPointOut(Schema):
    steps: float
    seconds: float
    gpu_s: float
    cpu_s: float
    generated_tokens: int


class DomainProjectionOut(Schema):
    slope_per_step: Optional[float] = None
    per_point: Optional[PerPointOut] = None
    """What one more point (0.01) of this domain's reward costs at its current slope; null when it is not rising."""
    note: str = ""


class ProjectionOut(Schema):
    steps_left: int
    seconds_per_step: float
    eta_s: float
    gpu_s_to_finish: float
    cpu_s_to_finish: float
    rate_steps: int
    cost_to_finish: Optional[str] = None
    """Money for the steps left at the mean cost of the same recent steps; null: unknown."""
    domains: dict[str, DomainProjectionOut]


class CostOut(Schema):
    """A cost in money, as decimal strings in the report's currency; null: unknown (a figure
    above 0 whose pool has no price), never 0."""
    gpu: Optional[str] = None
    cpu: Optional[str] = None
    sandbox: Optional[str] = None
    judge: Optional[str] = None
    total: Optional[str] = None


class PricesOut(Schema):
    """The prices the costs were computed at (the pools', now): per GPU-hour, CPU-hour,
    sandbox-hour and million judge tokens; null: not set."""
    gpu: Optional[str] = None
    cpu: Optional[str] = None
    sandbox: Optional[str] = None
    judge: Optional[str] = None
    currency: str


class StepCostOut(Schema):
    step: int
    total: Optional[str] = None


class RunCostOut(Schema):
    currency: str
    prices: PricesOut
    totals: CostOut
    domains: dict[str, CostOut]
    """Each domain's own rows: its sandbox and judge cost."""
    shared: CostOut
    """The steps' own rows: GPU and CPU time, not split among domains (totals = domains + shared)."""
    steps: list[StepCostOut]
    """Cost per step, in step order: the series."""
    budget: Optional[str] = None
    budget_left: Optional[str] = None
    """What is left of the money budget; null with no budget or an unknown cost."""


class RunUsageOut(Schema):
    run: int
    totals: UsageFigures
    domains: dict[str, UsageFigures]
    cost: RunCostOut
    projection: Optional[ProjectionOut] = None


class CostedFigures(UsageFigures):
    cost: CostOut


class RunUsageRow(CostedFigures):
    run: int
    name: str


class DomainUsageRow(CostedFigures):
    domain: str


class TeamUsageOut(Schema):
    team: str
    start: Optional[datetime] = None
    end: Optional[datetime] = None
    currency: str
    prices: PricesOut
    totals: CostedFigures
    runs: list[RunUsageRow]
    domains: list[DomainUsageRow]


@router.get("/runs/{run_id}/usage", response={200: RunUsageOut, **ERRORS})
def run_usage(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID)):
    """What the run consumed (totals and per domain, recorded with each step), what that cost in
    money at the pools' prices (totals, per domain, per step, and its money budget) and, while
    it runs, the time and compute to finish and each domain's cost of one more point of reward."""
    return usage.run_usage(selectors.run_get(actor=request.auth, run_id=run_id))


@router.get("/teams/{slug}/usage", response={200: TeamUsageOut, **ERRORS}, tags=["accounts"])
def team_usage(request: HttpRequest, slug: str = Path(..., max_length=64), start: str = Query("", max_length=40),
               end: str = Query("", max_length=40), format: str = Query("json", pattern="^(json|csv)$")):
    """A team's usage between ``start`` and ``end`` (ISO dates or times; a date ``end`` includes
    that day): totals, per run, per domain, each with its cost in money at the pools' prices.
    Team admins and platform admins; ``format=csv``."""
    team = team_get(actor=request.auth, slug=slug)
    if not request.auth.platform_admin:
        request.auth.require(team.id, "team.admin", "team")
    lo, hi = usage.parse_range(start, end)
    report = usage.team_usage(team.id, start=lo, end=hi)
    if format == "csv":
        response = HttpResponse(usage.usage_csv(report), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="usage-{team.slug}.csv"'
        return response
    return {"team": team.slug, "start": lo, "end": hi, **report}


# ----------------------------------------------------------------------------- forecast
class ForecastCurveOut(Schema):
    a: float
    b: float
    c_mid: float
    r0: float = 0.0


class DomainForecastOut(Schema):
    domain: str
    points: list[list[float]]
    curve: Optional[ForecastCurveOut] = None
    asymptote_band: Optional[list[float]] = None
    target: Optional[float] = None
    compute_to_target: Optional[float] = None
    compute_band: Optional[list[Optional[float]]] = None
    reach_share: Optional[float] = None
    at: Optional[float] = None
    predicted: Optional[float] = None
    predicted_band: Optional[list[float]] = None
    note: str = ""
    curve_points: list[list[float]] = []
    """The fitted curve for a chart: ``[compute, reward]``, log-spaced."""
    curve_band: list[list[float]] = []
    """Its 95% bootstrap band at the same computes: ``[compute, low, high]``."""
    final: Optional[dict[str, float]] = None


class RunForecastOut(Schema):
    run: int
    compute: str
    compute_label: str
    target: Optional[float] = None
    spent: float
    domains: list[DomainForecastOut]


@router.get("/runs/{run_id}/forecast", response={200: RunForecastOut, **ERRORS})
def run_forecast(request: HttpRequest, run_id: int = Path(..., ge=1, le=MAX_ID), target: str = Query("", max_length=40),
                 compute: str = Query("tokens", max_length=20)):
    """Where each domain's held-out reward is heading: ScaleRL's curve ``R0 + (A - R0) / (1 + (C_mid / C)^B)``
    fitted to the run's evaluations against the compute spent by then (``compute``: ``tokens``,
    ``gpu_s`` or ``cpu_s``), the asymptote ``A`` with a bootstrap band, and the compute to reach
    ``target`` (a reward in (0, 1)) with its band; a domain with fewer than 4 evaluations says so."""
    run = selectors.run_get(actor=request.auth, run_id=run_id)
    value, kind = forecast.parse_options(target, compute)
    return forecast.run_forecast(run, target=value, compute=kind)
