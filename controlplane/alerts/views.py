"""Pages: the alert rules of the team being looked at (and the defaults), with their firings and
delivery log; the signed-in user's notifications. frontend/static/js/alerts.js edits rules, sends
test deliveries and marks notifications read through the REST API, so the page obeys the API's
rules (validation, roles)."""
from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.accounts.principal import Principal
from controlplane.accounts.selectors import current_team
from controlplane.alerts import selectors, services
from controlplane.alerts.models import Condition
from controlplane.common.views import get_or_404


@login_required
def alerts_page(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    rules = list(selectors.rule_list(actor=actor, team_id=team.id if team else None)) if team else \
        list(selectors.rule_list(actor=actor).filter(team__isnull=True))
    rows = []
    for rule in rules:
        editable = actor.platform_admin if rule.team_id is None else actor.can(rule.team_id, "run.control")
        rows.append({"rule": rule, "out": services.rule_out(rule), "editable": editable,
                     "json": json.dumps(services.rule_out(rule), default=str),
                     "deliveries": list(selectors.delivery_list(actor=actor, rule=rule)[:5])})
    firings = list(selectors.firing_list(actor=actor).filter(run__team=team)[:50]) if team else []
    return render(request, "alerts/index.html", {
        "rows": rows, "team": team, "firings": [(f, services.chart_path(f.run, f.step, f.key if f.rule.condition in
                                                                       services.METRIC_CONDITIONS else "")) for f in firings],
        "can_create": team is not None and actor.can(team.id, "run.control"),
        "conditions": [(c.value, c.label) for c in Condition], "event_kinds": services.EVENT_KINDS,
    })


@login_required
def rule_page(request: HttpRequest, rule_id: int) -> HttpResponse:
    actor = Principal.for_user(request.user)
    rule = get_or_404(selectors.rule_get, actor=actor, rule_id=rule_id)
    firings = [(f, services.chart_path(f.run, f.step, f.key if rule.condition in services.METRIC_CONDITIONS else ""))
               for f in selectors.firing_list(actor=actor, rule_id=rule.id)[:100]]
    return render(request, "alerts/rule.html", {
        "rule": rule, "out": services.rule_out(rule), "json": json.dumps(services.rule_out(rule), default=str),
        "editable": actor.platform_admin if rule.team_id is None else actor.can(rule.team_id, "run.control"),
        "firings": firings, "deliveries": list(selectors.delivery_list(actor=actor, rule=rule)[:100]),
        "conditions": [(c.value, c.label) for c in Condition], "event_kinds": services.EVENT_KINDS,
    })


@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    items = list(selectors.notifications(user=request.user)[:200])
    return render(request, "alerts/notifications.html", {"items": items})
