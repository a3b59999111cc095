"""API: model versions, eval suites and evaluations, comparison, aliases (gated), rollback, export."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional, Union

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.pagination import paginate

from controlplane.accounts.models import Team
from controlplane.common.api import ERRORS, MAX_ID, MAX_VERSION, body_doc, json_body, json_object
from controlplane.common.errors import InvalidInput, NotFound
from controlplane.common.validation import validate
from controlplane.registry import aliases, selectors, services
from controlplane.registry.models import ALIASES
from controlplane.runs.api import RUN_BODY
from controlplane.runs.estimate import run_estimate

router = Router(tags=["registry"])
estimate_router = Router(tags=["runs"])
"""``POST /api/runs/estimate``: mounted before the runs app's router, whose ``/runs/{run_id}`` would
otherwise take the path."""


class AliasRefOut(Schema):
    name: str
    base: str


class ModelVersionOut(Schema):
    id: int
    name: str
    kind: str
    team: str = Field(alias="team.slug")
    base: str
    base_model: str
    run: Optional[int] = Field(None, alias="run_id")
    step: int
    parent: Optional[str] = Field(None, alias="parent.name")
    aliases: list[str]
    created_at: datetime

    @staticmethod
    def resolve_aliases(obj) -> list[str]:
        return sorted(a.name for a in obj.aliases.all())


class VersionDetailOut(ModelVersionOut):
    path: str
    config: dict[str, Any]
    pinned: dict[str, int]
    metrics: dict[str, Any]
    checkpoint: Optional[int] = Field(None, alias="checkpoint_id")


class SuiteItemOut(Schema):
    domain: str
    domain_version: int
    layer: str
    tasks: int
    seed: int
    samples: int
    temperature: float
    max_new_tokens: int
    max_turns: int
    max_episode_tokens: int
    level: int
    levels: list[int] = []
    k: list[int]


class SuiteOut(Schema):
    slug: str = Field(alias="suite.slug")
    title: str = Field(alias="suite.title")
    team: Optional[str] = Field(None, alias="suite.team.slug")
    version: int
    auto_evaluate: bool = Field(alias="suite.auto_evaluate")
    items: list[SuiteItemOut]


class ResultOut(Schema):
    domain: str
    domain_version: int
    layer: str
    tasks: int
    samples: int
    pass_at: dict[str, float]
    mean_reward: Optional[float] = None
    outcomes: dict[str, int]
    tokens_per_task: float
    seconds_per_task: float


class EvalOut(Schema):
    id: int
    version: str = Field(alias="version.name")
    version_id: int
    suite: str = Field(alias="suite_version.suite.slug")
    suite_version: int = Field(alias="suite_version.version")
    engine: str
    state: str
    error: str
    held: str = ""
    """Why a queued evaluation waits: the verifier audits of the suite's domain versions have not cleared them."""
    created_at: datetime
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None


class EvalDetailOut(EvalOut):
    results: list[ResultOut]

    @staticmethod
    def resolve_results(obj) -> list:
        return list(obj.results.all())


class EvalTaskOut(Schema):
    domain: str
    layer: str
    task_id: str
    rewards: list[Optional[float]]
    outcomes: list[str]
    tokens: int
    seconds: float
    completion: str


class AliasOut(Schema):
    team: str = Field(alias="team.slug")
    base: str
    name: str
    version: str = Field(alias="version.name")
    version_id: int
    updated_at: datetime


class MoveOut(Schema):
    at: datetime
    kind: str
    from_version: Optional[str] = Field(None, alias="from_version.name")
    to_version: str = Field(alias="to_version.name")
    actor: Optional[str] = Field(None, alias="actor.username")
    reason: str
    gate: dict[str, Any]


class GateRefusedOut(Schema):
    detail: str
    errors: list[dict[str, str]]
    gate: dict[str, Any]


class ExportOut(Schema):
    version: str
    path: str


EVAL_IN = {
    "type": "object", "required": ["suite"], "additionalProperties": False,
    "properties": {"suite": {"type": "string"}, "suite_version": {"type": "integer", "minimum": 1},
                   "engine": {"enum": ["torch", "vllm"]}},
}
ALIAS_IN = {
    "type": "object", "required": ["version"], "additionalProperties": False,
    "properties": {"version": {"type": ["integer", "string"], "description": "id, name or alias of the version"},
                   "reason": {"type": "string"}, "override": {"type": "boolean"},
                   "suite": {"type": "string", "description": "judge the promotion on this suite only"}},
}
ROLLBACK_IN = {
    "type": "object", "required": ["base"], "additionalProperties": False,
    "properties": {"base": {"type": "string"}, "team": {"type": "string"}, "reason": {"type": "string"}},
}
EXPORT_IN = {"type": "object", "additionalProperties": False, "properties": {
    "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$", "maxLength": 200,
             "description": "directory under the server's var/exports (default: from the version's name)"}}}


def _body(request: HttpRequest, schema: dict) -> dict:
    data = json_object(request) if request.body else {}
    validate(data, schema)
    return data


# ----------------------------------------------------------------------------- base models for every team
class BaseModelOut(Schema):
    name: str
    reference: str
    path: str
    description: str
    created_at: datetime

    @staticmethod
    def resolve_reference(obj) -> str:
        return f"base:{obj.name}"


class RunEstimateOut(Schema):
    steps: dict[str, Any]
    """The steps the run would take and why (``budget.steps``, or its wall limit)."""
    figures: dict[str, Any]
    """Per figure (``UsageRecord``'s names): ``value`` for the run, ``per_step``, ``source`` and
    the domains it could not measure (``unmeasured``, counted as 0)."""
    usage: dict[str, Union[int, float, None]]
    """The run's figures alone, as a price list reads a run's usage."""
    domains: list[dict[str, Any]]
    rollout: dict[str, Any]
    assumptions: list[str]
    cost: dict[str, Any]
    """The figures in money at the platform admin's prices: each part and ``total`` as decimal
    text (None where a figure has no price or was not measured), ``currency``, ``prices``, the
    money ``budget`` and ``within_budget``."""


@estimate_router.post("/runs/estimate", response={200: RunEstimateOut, **ERRORS}, openapi_extra=RUN_BODY)
def run_estimate_view(request: HttpRequest):
    """What a run body would consume (steps, completions, tokens, wall, GPU, CPU and sandbox
    seconds, judge tokens), from its domains' run history or evaluations, each figure with its
    source. The body is validated as ``POST /api/runs`` validates it; nothing is saved. Served
    here because the evaluations are the registry's (the registry reads the runs app)."""
    return run_estimate(actor=request.auth, data=json_body(request), evaluations=selectors.eval_task_costs)


@router.get("/registry/base-models", response={200: list[BaseModelOut], **ERRORS})
def base_model_list(request: HttpRequest):
    """Base models a platform admin registered for every team; a run names one ``base:<name>``."""
    return selectors.base_model_list()


@router.post("/registry/base-models", response={201: BaseModelOut, **ERRORS}, openapi_extra=body_doc(services.BASE_MODEL_SCHEMA))
def base_model_register(request: HttpRequest):
    """Register a base model for every team, or point a registered name at another directory (platform admins)."""
    return Status(201, services.base_model_register(actor=request.auth, data=json_object(request)))


@router.delete("/registry/base-models/{name}", response={200: dict, **ERRORS})
def base_model_remove(request: HttpRequest, name: str = Path(..., max_length=100)):
    """Remove a registered base model (platform admins); refused while a run that has not ended names it."""
    services.base_model_remove(actor=request.auth, name=name)
    return {"removed": name}


# ----------------------------------------------------------------------------- versions
@router.get("/registry/versions", response={200: list[ModelVersionOut], **ERRORS})
@paginate
def version_list(request: HttpRequest, team: str = "", base: str = "", run: Optional[int] = Query(None, ge=1, le=MAX_ID)):
    return selectors.version_list(actor=request.auth, team=team, base=base, run=run)


@router.get("/registry/versions/{version_id}", response={200: VersionDetailOut, **ERRORS})
def version_detail(request: HttpRequest, version_id: int = Path(..., ge=1, le=MAX_ID)):
    return selectors.version_get(actor=request.auth, ref=version_id)


@router.post("/registry/versions/{version_id}/evaluate", response={201: EvalOut, **ERRORS}, openapi_extra=body_doc(EVAL_IN))
def version_evaluate(request: HttpRequest, version_id: int = Path(..., ge=1, le=MAX_ID)):
    """Queue an evaluation of the version on a suite (a Celery job on the eval queue)."""
    version = selectors.version_get(actor=request.auth, ref=version_id)
    data = _body(request, EVAL_IN)
    sv = selectors.suite_version_get(actor=request.auth, slug=data["suite"], version=data.get("suite_version"))
    return Status(201, services.eval_start(actor=request.auth, version=version, suite_version=sv, engine=data.get("engine", "torch")))


@router.post("/registry/versions/{version_id}/export", response={200: ExportOut, **ERRORS}, openapi_extra=body_doc(EXPORT_IN))
def version_export(request: HttpRequest, version_id: int = Path(..., ge=1, le=MAX_ID)):
    """Write a promoted version as a Hugging Face directory (safetensors, config, tokenizer) under
    the server's ``var/exports/<team>/`` (the CLI writes anywhere its operator may). A name that
    holds another version's export is a 409; the same version's is replaced."""
    version = selectors.version_get(actor=request.auth, ref=version_id)
    data = _body(request, EXPORT_IN)
    dest = str(aliases.export_dir(version.team, data["name"])) if data.get("name") else ""
    path = aliases.version_export(actor=request.auth, version=version, dest=dest)
    return {"version": version.name, "path": str(path)}


# ----------------------------------------------------------------------------- suites and evaluations
@router.get("/registry/suites", response={200: list[SuiteOut], **ERRORS})
def suite_list(request: HttpRequest):
    return [s.versions.select_related("suite__team").get(version=s.version) for s in selectors.suite_list(actor=request.auth)]


@router.post("/registry/suites", response={201: SuiteOut, **ERRORS}, openapi_extra=body_doc(services.SUITE_SCHEMA))
def suite_save(request: HttpRequest):
    """Create a suite, or a new version of it when its items change (versions are immutable)."""
    return Status(201, services.suite_save(actor=request.auth, data=json_object(request)))


@router.get("/registry/suites/{slug}", response={200: SuiteOut, **ERRORS})
def suite_detail(request: HttpRequest, slug: str, version: Optional[int] = Query(None, ge=1, le=MAX_VERSION)):
    return selectors.suite_version_get(actor=request.auth, slug=slug, version=version)


@router.get("/registry/evals", response={200: list[EvalOut], **ERRORS})
@paginate
def eval_list(request: HttpRequest, version: str = ""):
    v = selectors.version_get(actor=request.auth, ref=version) if version else None
    return selectors.eval_list(actor=request.auth, version=v)


@router.get("/registry/evals/{eval_id}", response={200: EvalDetailOut, **ERRORS})
def eval_detail(request: HttpRequest, eval_id: int = Path(..., ge=1, le=MAX_ID)):
    return selectors.eval_get(actor=request.auth, eval_id=eval_id)


@router.get("/registry/evals/{eval_id}/tasks", response={200: list[EvalTaskOut], **ERRORS})
def eval_tasks(request: HttpRequest, eval_id: int = Path(..., ge=1, le=MAX_ID), domain: str = ""):
    """Every task's samples: rewards, outcomes, tokens, seconds and the first completion."""
    ev = selectors.eval_get(actor=request.auth, eval_id=eval_id)
    rows = ev.results.filter(domain=domain) if domain else ev.results.all()
    return [{"domain": r.domain, "layer": r.layer, **t} for r in rows for t in r.per_task]


@router.get("/registry/compare", response={200: dict, **ERRORS})
def compare(request: HttpRequest, versions: str = Query(..., description="comma-separated ids, names or aliases; the first is the baseline"),
            suite: str = "", suite_version: Optional[int] = Query(None, ge=1, le=MAX_VERSION)):
    """Per domain and layer: mean reward with a 95% bootstrap interval, pass@k, and the paired
    difference to the first version with its interval; significant regressions are flagged."""
    refs = [r.strip() for r in versions.split(",") if r.strip()]
    return selectors.compare_versions(actor=request.auth, refs=refs, suite=suite, suite_version=suite_version)


# ----------------------------------------------------------------------------- aliases
@router.get("/registry/aliases", response={200: list[AliasOut], **ERRORS})
def alias_list(request: HttpRequest, team: str = ""):
    return list(selectors.alias_list(actor=request.auth, team=team))


@router.post("/registry/aliases/{name}", response={200: AliasOut, **ERRORS, 409: GateRefusedOut}, openapi_extra=body_doc(ALIAS_IN))
def alias_move(request: HttpRequest, name: str):
    """Move an alias. ``production`` is gated: a significant regression beyond the threshold on
    any domain refuses the move (409) unless a team admin sends ``override: true`` with a reason."""
    if name not in ALIASES:
        raise NotFound(f"no alias {name!r}; aliases: {', '.join(ALIASES)}")
    data = _body(request, ALIAS_IN)
    version = selectors.version_get(actor=request.auth, ref=data["version"])
    try:
        return aliases.alias_move(actor=request.auth, version=version, name=name, reason=data.get("reason", ""),
                                   override=bool(data.get("override")), suite=data.get("suite", ""))
    except aliases.GateRefused as exc:
        return Status(409, {"detail": str(exc), "errors": [], "gate": exc.verdict})


@router.post("/registry/aliases/{name}/rollback", response={200: AliasOut, **ERRORS}, openapi_extra=body_doc(ROLLBACK_IN))
def alias_rollback(request: HttpRequest, name: str):
    """Point the alias back at the version it pointed at before its last move."""
    if name not in ALIASES:
        raise NotFound(f"no alias {name!r}; aliases: {', '.join(ALIASES)}")
    data = _body(request, ROLLBACK_IN)
    teams = Team.objects.filter(pk__in=request.auth.team_ids)
    if data.get("team"):
        teams = teams.filter(slug=data["team"])
    team_list = list(teams.filter(model_aliases__base=data["base"], model_aliases__name=name).distinct()[:2])
    if not team_list:
        raise NotFound(f"{data['base']} has no {name} alias")
    if len(team_list) > 1:
        raise InvalidInput.one("team", "required: several of your teams have this alias")
    return aliases.alias_rollback(actor=request.auth, team=team_list[0], base=data["base"], name=name,
                                   reason=data.get("reason", ""))


@router.get("/registry/aliases/{name}/history", response={200: list[MoveOut], **ERRORS})
def alias_history(request: HttpRequest, name: str, base: str):
    return list(selectors.alias_history(actor=request.auth, base=base, name=name))
