"""Compute accounting in the browser: a run's usage card (re-rendered by the run page while the
run trains) and a team's usage report for its admins, with a date range and CSV export."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team, team_get
from controlplane.common.errors import InvalidInput
from controlplane.common.views import get_or_404
from controlplane.runs import selectors as run_selectors
from controlplane.runs import usage


@login_required
def run_usage_card(request: HttpRequest, run_id: int) -> HttpResponse:
    """The usage card of the run page (the page asks for it again while the run trains)."""
    run = get_or_404(run_selectors.run_get, actor=Principal.for_user(request.user), run_id=run_id)
    return render(request, "runs/usage_card.html", {"run": run, "usage": usage.run_usage(run)})


@login_required
def team_usage_page(request: HttpRequest) -> HttpResponse:
    """A team's usage between two dates: totals, per run and per domain (team admins and platform
    admins); the same report as CSV from the API."""
    actor = Principal.for_user(request.user)
    team, teams = current_team(request)
    slug = request.GET.get("team", "") or (team.slug if team else "")
    allowed = list(Team.objects.order_by("slug")) if actor.platform_admin else [t for t in teams if actor.can(t.id, "team.admin")]
    context = {"teams": allowed, "slug": slug, "start": request.GET.get("start", ""), "end": request.GET.get("end", ""),
               "errors": [], "report": None, "fields": usage.USAGE_FIELDS}
    if not allowed:
        context["errors"] = ["Usage reports are for team admins and platform admins."]
        return render(request, "usage.html", context, status=403)
    chosen = get_or_404(team_get, actor=actor, slug=slug) if slug else allowed[0]
    if not (actor.platform_admin or actor.can(chosen.id, "team.admin")):
        context["errors"] = [f"Only the admins of {chosen.slug} (and platform admins) read its usage."]
        return render(request, "usage.html", context, status=403)
    context["slug"] = chosen.slug
    try:
        lo, hi = usage.parse_range(context["start"], context["end"])
    except InvalidInput as exc:
        context["errors"] = [str(e) for e in exc.errors]
        return render(request, "usage.html", context, status=400)
    context["report"] = usage.team_usage(chosen.id, start=lo, end=hi)
    return render(request, "usage.html", context)
