"""Server-rendered review pages: the queues, the labelling page and a judge's calibration page.

The pages render the state; frontend/static/js/review.js drives labelling (keyboard shortcuts)
and the admin actions through the REST API, so the server's rules (blind scores, reservations,
the calibration threshold) are the API's.
"""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.common.views import get_or_404
from controlplane.domains.selectors import domain_list
from controlplane.review import selectors, services
from controlplane.review.queues import queue_lost
from controlplane.review.models import Strategy


@login_required
def index(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    queues = list(selectors.queue_list(actor=actor).order_by("-created_at")[:200])
    rows = list(zip(queues, selectors.queue_progress_many(queues)))
    judges = selectors.judge_list(actor=actor)
    team, _ = current_team(request)
    can_create = team is not None and (actor.platform_admin or actor.can(team.id, "team.admin"))
    judged = []
    if can_create:  # domains whose cascade has a judge stage: what a queue samples from
        judged = [d.slug for d in domain_list(actor=actor)
                  if any(st.get("type") == "judge" for st in (d.verifier or {}).get("stages", []))]
    return render(request, "review/index.html", {
        "rows": rows, "judges": judges, "can_create": can_create, "team": team, "judged_domains": judged,
        "strategies": [(s.value, s.label) for s in Strategy],
        "team_judges": [j.slug for j in judges if team is not None and j.team_id == team.id],
    })


@login_required
def queue_page(request: HttpRequest, queue_id: int) -> HttpResponse:
    actor = Principal.for_user(request.user)
    queue = get_or_404(selectors.queue_get, actor=actor, queue_id=queue_id)
    can_label = actor.can(queue.team_id, "label")
    is_admin = actor.platform_admin or actor.can(queue.team_id, "team.admin")
    report = selectors.queue_report(queue)
    return render(request, "review/queue.html", {
        "queue": queue, "config": queue.judge_config, "judge": queue.judge_config.judge, "can_label": can_label,
        "progress": selectors.queue_progress(queue, request.user), "report": report,
        "is_admin": is_admin, "class_note": selectors.queue_class_note(queue),
        "lost": queue_lost(queue),
        "initial": {"queue": queue.pk, "format": queue.judge_config.score_format, "blind": queue.blind, "stats": report,
                    "can_label": can_label, "is_admin": is_admin, "judge": queue.judge_config.judge.slug,
                    "version": queue.judge_config.version, "active": queue.judge_config.judge.active_id == queue.judge_config.pk,
                    "history": selectors.queue_history(queue, request.user) if can_label else []},
    })


@login_required
def judge_page(request: HttpRequest, slug: str) -> HttpResponse:
    actor = Principal.for_user(request.user)
    judge = get_or_404(selectors.judge_get, actor=actor, slug=slug)
    is_admin = actor.platform_admin or actor.can(judge.team_id, "team.admin")
    versions = []
    for config in judge.versions.order_by("-version"):
        check = services.calibration_check(config)
        versions.append({"config": config, "check": check, "report": check["report"], "shadow": selectors.shadow_summary(config),
                         "active": judge.active_id == config.pk, "kappa": check["report"]["metrics"]["kappa"]})
    return render(request, "review/judge.html", {
        "judge": judge, "versions": versions, "is_admin": is_admin,
        "queues": selectors.queue_list(actor=actor, judge=judge.slug).order_by("-created_at")[:50],
        "initial": {"judge": judge.slug, "is_admin": is_admin},
    })
