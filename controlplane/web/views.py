"""Server-rendered pages. Each page renders what it knows at once; frontend/static/js adds the
live parts (websockets, charts) and talks to the same REST API as everyone else, so the server
refuses what a role may not do whether or not the page showed the control."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.alerts import selectors as alert_selectors
from controlplane.common.errors import InvalidInput, NotFound
from controlplane.common.validation import is_row_id
from controlplane.common.views import get_or_404
from controlplane.domains import selectors as domain_selectors
from controlplane.domains.selectors import domain_list
from controlplane.registry import selectors as registry_selectors
from controlplane.runs import selectors as run_selectors
from controlplane.runs import forecast, usage
from controlplane.runs.models import RunState
from controlplane.runs.schemas import MAX_MEMBER_PRIORITY
from controlplane.web import pages, sketch

VISIBLE_AT_FIRST = 12
"""Domains drawn when the run page opens (the others are one click away in the toolbar)."""


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The runs list of the team being looked at; rows update live over ``/ws/runs/``."""
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    q, state = request.GET.get("q", "").strip()[:200], request.GET.get("state", "")
    tag = request.GET.get("tag", "").strip()[:100]
    sort = request.GET.get("sort", "-created")
    if sort not in pages.RUN_SORTS:
        sort = "-created"
    runs = pages.runs_for_list(run_selectors.run_list(actor=actor, team=team.slug if team else "", tag=tag,
                                                      state=state if state in RunState.values else ""), q=q, sort=sort)
    pages.attach_sparks(runs)
    domains = domain_list(actor=actor)
    kinds = dict(domains.values_list("kind").annotate(n=Count("id")).order_by("kind"))
    return render(request, "home.html", {
        "runs": runs, "domain_count": sum(kinds.values()), "kinds": sorted(kinds.items()),
        "can_create": bool(team) and actor.can(team.id, "run.control"),
        "q": q, "state": state, "sort": sort, "states": RunState.values, "tag": tag,
        "tags": run_selectors.tag_names(actor=actor, team=team.slug if team else ""),
        "sorts": [(k, label) for k, (label, _) in pages.RUN_SORTS.items()],
    })


@login_required
def runs_compare(request: HttpRequest) -> HttpResponse:
    """``?run=ID&run=ID...``: the runs' curves overlaid (per-domain reward and pass rate,
    throughput) beside the differences in their settings."""
    actor = Principal.for_user(request.user)
    ids = list(dict.fromkeys(request.GET.getlist("run")))
    error = ""
    if not 2 <= len(ids) <= pages.MAX_COMPARED_RUNS:
        error = f"Tick from 2 to {pages.MAX_COMPARED_RUNS} runs on the runs list to compare them."
    elif not all(is_row_id(i) for i in ids):
        error = "Runs are named by their ids."
    runs = [] if error else [get_or_404(run_selectors.run_get, actor=actor, run_id=int(i)) for i in ids]
    domains = list(dict.fromkeys(rd.domain.slug for r in runs for rd in r.run_domains.select_related("domain")))
    return render(request, "runs/compare.html", {
        **_forecasts_compared(runs, request.GET),
        "runs": runs, "error": error, "diff": pages.settings_diff(runs) if runs else [],
        "page_data": {"runs": [{"id": r.id, "name": r.name, "state": r.state} for r in runs], "domains": domains},
    })


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    """The run form: model, domain mix, algorithm and rollout settings; "clone from run" pre-fills."""
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    clone = None
    if request.GET.get("clone"):
        try:
            if not is_row_id(request.GET["clone"]):
                raise NotFound("not a run id")
            source = run_selectors.run_get(actor=actor, run_id=int(request.GET["clone"]))
        except NotFound:
            raise Http404("no such run to clone")
        clone = pages.run_as_form_data(source)
    return render(request, "runs/new.html", {
        "can_create": bool(team) and actor.can(team.id, "run.control"),
        "is_admin": bool(team) and actor.can(team.id, "team.admin"),
        "max_member_priority": MAX_MEMBER_PRIORITY, "currency": settings.TEMPER_CURRENCY,
        "run_fields": (fields := pages.run_form_fields()),
        "run_field_groups": pages.run_form_groups(fields),
        "form_data": {
            "team": team.slug if team else "",
            "domains": pages.domain_catalogue(actor),
            "models": pages.model_catalogue(),
            "config_schema": pages.config_form_schema(),
            "clone": clone,
            "runs": [{"id": r.id, "name": r.name} for r in run_selectors.run_list(actor=actor, team=team.slug if team else "")[:50]],
        },
    })


def _forecasts_compared(runs: list, query) -> dict:
    """The compare page's forecast table: per domain, each run's asymptote and compute to the
    target, side by side (the same options as the run page's card)."""
    options = _forecast_options(query)
    if options["errors"] or not runs:
        return {"forecast_rows": [], "forecast_options": options}
    target, compute = options["parsed"]
    fits = [{d["domain"]: d for d in forecast.run_forecast(run, target=target, compute=compute)["domains"]} for run in runs]
    rows = [{"domain": domain, "cells": [f.get(domain) for f in fits]}
            for domain in dict.fromkeys(domain for f in fits for domain in f)]
    return {"forecast_rows": rows, "forecast_options": {**options, "label": forecast.COMPUTE[compute][1], "target_value": target}}


def _forecast_options(query) -> dict:
    """The forecast options a page's query asks (``target``, ``compute``) as given, and either
    ``parsed`` (their values) or their ``errors``."""
    options = {"target": query.get("target") or None, "compute": query.get("compute") or "tokens",
               "kinds": [(k, label) for k, (_, label) in forecast.COMPUTE.items()], "errors": [], "parsed": None}
    try:
        options["parsed"] = forecast.parse_options(options["target"], options["compute"])
    except InvalidInput as exc:
        options["errors"] = exc.errors
    return options


def _forecast_context(run, query) -> dict:
    """The forecast card's figures for the target and compute the page's query asks (their
    errors shown beside the form, never a failed page)."""
    options = _forecast_options(query)
    if options["errors"]:
        return {"forecast": None, "forecast_options": options}
    target, compute = options["parsed"]
    return {"forecast": forecast.run_forecast(run, target=target, compute=compute), "forecast_options": options}


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """The live run page: charts, what the run waits on, its events, controls for those allowed."""
    actor = Principal.for_user(request.user)
    run = get_or_404(run_selectors.run_get, actor=actor, run_id=run_id)
    run_domains = list(run.run_domains.select_related("domain"))
    domains = [rd.domain.slug for rd in run_domains]
    can_control = actor.can(run.team_id, "run.control")
    first = [f"reward/{d}" for d in domains[:VISIBLE_AT_FIRST]]
    eval_source = registry_selectors.eval_source(run)
    suite_domains = [i["domain"] for i in eval_source["items"]] if eval_source and eval_source["kind"] == "suite" else []
    return render(request, "runs/detail.html", {
        "usage": usage.run_usage(run),  # the card is whole on first render, running or finished
        **_forecast_context(run, request.GET),
        "eval_source": eval_source,
        "warnings": run_selectors.run_warnings(run=run),
        "integrity": run_selectors.run_integrity(run=run, firing=alert_selectors.firing_keys(run=run)),
        "run": run, "can_control": can_control, "terminal": run.is_terminal,
        "run_fields": pages.run_field_values(run),
        "advice": run_selectors.run_split_advice(run=run),
        "prefetch_url": f"/api/runs/{run.id}/series?{urlencode({'key': ','.join(first)})}" if first else "",
        "reward_sketch": sketch.run_reward_sketch(run, first),  # drawn before plotly.js has loaded
        "page_data": {
            "run": {"id": run.id, "name": run.name, "state": run.state, "step": run.current_step,
                    "budget_steps": run.budget_steps, "team": run.team.slug,
                    "started_at": run.started_at.isoformat() if run.started_at else None},
            "domains": domains,
            "weights": {rd.domain.slug: rd.weight for rd in run_domains},
            "can_control": can_control,
            "outcomes": pages.OUTCOME_ORDER,
            "visible_at_first": VISIBLE_AT_FIRST,
            # the held-out chart plots every domain its source evaluates, the run's first
            "eval_domains": list(dict.fromkeys(domains + suite_domains)),
        },
    })


DOMAINS_PER_PAGE = 50

AUDIT_TONES = [("ok", "audited clean"), ("warn", "gold failing or re-audit open"), ("unsafe", "false positives"),
               ("overridden", "overridden"), ("failed", "audit failed"), ("waiting", "audit pending or running"),
               ("none", "not audited")]


@login_required
def domains_page(request: HttpRequest) -> HttpResponse:
    """The catalogue as a team reads it: search, filters (kind, family, owner, audit state), pages
    of 50, and only the columns whose values differ among the rows shown."""
    actor = Principal.for_user(request.user)
    f = {k: request.GET.get(k, "")[:200] for k in ("q", "kind", "family", "owner", "audit")}
    visible = domain_list(actor=actor)
    families = sorted(set(visible.exclude(family="").values_list("family", flat=True)))
    owners = sorted(set(visible.filter(team__isnull=False).values_list("team__slug", flat=True)))
    qs = domain_list(actor=actor, search=f["q"], kind=f["kind"]).select_related("team")
    if f["family"]:
        qs = qs.filter(family=f["family"])
    if f["owner"] == "catalogue":
        qs = qs.filter(team__isnull=True)
    elif f["owner"]:
        qs = qs.filter(team__slug=f["owner"])
    rows = [(d, domain_selectors.domain_audit_summary(d)) for d in domain_selectors.with_audit_summary(qs)]
    if f["audit"]:
        rows = [(d, a) for d, a in rows if a.tone == f["audit"]]
    columns = pages.varying_domain_columns([d for d, _ in rows])
    same = [(c.replace("_", " "), pages.domain_value_text(rows[0][0], c)) for c in pages.DOMAIN_COLUMNS
            if c not in columns] if rows else []
    page = Paginator(rows, DOMAINS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "domains.html", {
        **f, "page": page, "rows": page.object_list, "total": len(rows), "columns": columns, "same": same,
        "kinds": pages.DOMAIN_KINDS, "families": families, "owners": owners, "audit_tones": AUDIT_TONES,
        "query": urlencode({k: v for k, v in f.items() if v}),
    })


@login_required
def domain_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """A domain: version history with diffs, verifier cascade, sandbox, quota, live stats."""
    actor = Principal.for_user(request.user)
    domain = get_or_404(domain_selectors.domain_get, actor=actor, slug=slug)
    versions = list(domain.versions.order_by("-version"))
    summaries = domain_selectors.audit_summaries(versions=versions)
    audit = pages.audit_view(domain=domain, version=next((v for v in versions if v.version == domain.version), None))
    return render(request, "domains/detail.html", {
        "domain": domain, "versions": [(v, summaries[v.id]) for v in versions], "audit": audit,
        "can_edit": domain_selectors.domain_can_edit(actor=actor, domain=domain),
        "stats": run_selectors.domain_stats(actor=actor, domain=domain),
        "page_data": {"slug": domain.slug, "versions": [v.version for v in versions],
                      "audit": {"state": audit["summary"].state, "status": audit["summary"].latest_status,
                                "watch": audit["watch"]}},
        "verifier_json": json.dumps(domain.verifier, indent=2),
        "task_source_json": json.dumps(domain.task_source, indent=2),
    })


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    """Quotas and the queue: pools, team quotas, queued runs and why, running runs and their use."""
    actor = Principal.for_user(request.user)
    context = pages.queue_view(actor=actor)
    template = "queue_body.html" if request.GET.get("partial") else "queue.html"
    return render(request, template, context)


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("team", "")
    _, teams = current_team(request)
    if any(t.slug == slug for t in teams):
        request.session["team"] = slug
    nxt = request.POST.get("next") or ""
    if not nxt.startswith("/") or nxt.startswith("//"):
        nxt = reverse("home")
    return HttpResponseRedirect(nxt)


def sw_precache() -> tuple[str, ...]:
    """Static files the service worker keeps compiled in the browser (``frontend/templates/sw.js``):
    the plotly.js the pages load."""
    return (settings.TEMPER_PLOTLY_JS,)


def service_worker(request: HttpRequest) -> HttpResponse:
    """``/sw.js``, at the site's root so that it serves every page. Its cache is named after the
    files' sizes and times, so a changed file makes a new worker that replaces the old cache;
    browsers check it again on each visit (``no-cache``)."""
    paths = sw_precache()
    urls = [static(path) for path in paths]
    stamp = hashlib.sha256(json.dumps([(u, _static_stamp(p)) for u, p in zip(urls, paths)]).encode()).hexdigest()[:12]
    response = render(request, "sw.js", {"cache_name_json": json.dumps(f"temper-{stamp}"), "precache_json": json.dumps(urls)},
                      content_type="text/javascript")
    response["Cache-Control"] = "no-cache"
    return response


def _static_stamp(path: str) -> list:
    found = finders.find(path)
    if not found:
        return []
    st = os.stat(found)
    return [st.st_size, int(st.st_mtime)]


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


_FAVICON = Path(__file__).resolve().parents[2] / "frontend" / "static" / "favicon.ico"


def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on every page that names none (the admin, the API
    docs): the static icon, cached for a day."""
    response = HttpResponse(_FAVICON.read_bytes(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
