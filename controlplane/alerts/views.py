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


def _shown(deliveries, reveal: bool) -> list:
    """Deliveries with the target each viewer may see (``shown``) and, for those who do not edit
    the rule, no receiver's error text (it can name internal hosts)."""
    out = list(deliveries)
    for d in out:
        d.shown = services.shown_target(d.channel, d.target, reveal=reveal)
        d.shown_error = d.last_error if reveal else ("failed" if d.last_error else "")
    return out


@login_required
def alerts_page(request: HttpRequest) -> HttpResponse:
    actor = Principal.for_user(request.user)
    team, _ = current_team(request)
    rules = list(selectors.rule_list(actor=actor, team_id=team.id if team else None)) if team else \
        list(selectors.rule_list(actor=actor).filter(team__isnull=True))
    rows = []
    own = {rule.name for rule in rules if rule.team_id is not None}  # a team rule of a default's name replaces it
    for rule in rules:
        editable = services.editable(actor, rule.team_id)
        out = services.rule_out(rule, reveal=editable)
        # what a team's own copy of a default starts from: its condition and advice, in-app only
        copy = json.dumps({k: out[k] for k in ("name", "condition", "metric", "threshold", "window", "events", "advice", "enabled")}
                          | {"channels": [{"type": "in_app"}]}) if rule.team_id is None else ""
        rows.append({"rule": rule, "out": out, "editable": editable, "copy": copy,
                     "replaced": rule.team_id is None and rule.name in own,
                     "deliveries": _shown(selectors.delivery_list(actor=actor, rule=rule)[:5], editable)})
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
    editable = services.editable(actor, rule.team_id)
    firings = [(f, services.chart_path(f.run, f.step, f.key if rule.condition in services.METRIC_CONDITIONS else ""))
               for f in selectors.firing_list(actor=actor, rule_id=rule.id)[:100]]
    return render(request, "alerts/rule.html", {
        "rule": rule, "out": services.rule_out(rule, reveal=editable),
        "json": json.dumps(services.rule_out(rule, reveal=True), default=str) if editable else "",
        "editable": editable, "firings": firings, "deliveries": _shown(selectors.delivery_list(actor=actor, rule=rule)[:100], editable),
        "conditions": [(c.value, c.label) for c in Condition], "event_kinds": services.EVENT_KINDS,
    })


@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    items = list(selectors.notifications(actor=Principal.for_user(request.user))[:200])
    return render(request, "alerts/notifications.html", {"items": items})
