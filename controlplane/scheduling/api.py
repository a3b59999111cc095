"""API: a team's quota (read by its members, set by platform admins)."""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from controlplane.accounts.selectors import team_get
from controlplane.common.api import ERRORS, body_doc, json_object
from controlplane.scheduling import services
from controlplane.scheduling.models import TeamQuota

router = Router(tags=["accounts"])


class QuotaOut(Schema):
    team: str
    max_gpus: int
    max_concurrent_runs: int


def _quota_out(quota: TeamQuota) -> dict:
    return {"team": quota.team.slug, "max_gpus": quota.max_gpus, "max_concurrent_runs": quota.max_concurrent_runs}


@router.get("/teams/{slug}/quota", response={200: QuotaOut, **ERRORS})
def quota_get(request: HttpRequest, slug: str):
    quota, _ = TeamQuota.objects.get_or_create(team=team_get(actor=request.auth, slug=slug))
    return _quota_out(quota)


@router.put("/teams/{slug}/quota", response={200: QuotaOut, **ERRORS}, openapi_extra=body_doc(services.TEAM_QUOTA_SCHEMA))
def quota_set(request: HttpRequest, slug: str):
    team = team_get(actor=request.auth, slug=slug)
    return _quota_out(services.team_quota_set(actor=request.auth, team=team, changes=json_object(request)))
