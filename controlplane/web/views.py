"""Server-rendered pages: home, runs and domains. The live run page comes with the browser issue."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.accounts.principal import Principal
from controlplane.domains.selectors import domain_list
from controlplane.runs.selectors import run_list
from controlplane.web.context import current_team


@login_required
def home(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    runs = run_list(actor=actor, team=team.slug if team else "")[:50]
    domains = domain_list(actor=actor)
    kinds = {}
    for kind in domains.values_list("kind", flat=True):
        kinds[kind] = kinds.get(kind, 0) + 1
    return render(request, "home.html", {"runs": runs, "domain_count": domains.count(), "kinds": sorted(kinds.items())})


@login_required
def domains_page(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    q = request.GET.get("q", "")
    kind = request.GET.get("kind", "")
    domains = domain_list(actor=actor, search=q, kind=kind)[:500]
    return render(request, "domains.html", {"domains": domains, "q": q, "kind": kind})


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("team", "")
    _, teams = current_team(request)
    if any(t.slug == slug for t in teams):
        request.session["team"] = slug
    return HttpResponseRedirect(request.POST.get("next") or reverse("home"))


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")
