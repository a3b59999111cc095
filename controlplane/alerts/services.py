"""Alert rules (validated writes), their evaluation after each step and in the sweep, firings,
and deliveries through the channels of controlplane/alerts/channels/ (one class per kind, one
file each: signed webhooks, Slack-compatible incoming webhooks, e-mail and in-app notifications).

Evaluation: ``alerts_after_step`` runs in the run driver right after a step's metrics are written
(so a condition that holds at step s fires at step s); ``alerts_sweep`` runs on the ``control``
queue every ``TEMPER_ALERT_SWEEP_S`` for what no step announces: a run that stopped stepping
(``stalled``), events of runs that no longer step (``failed``), and deliveries due a retry.

A delivery is tried up to ``MAX_ATTEMPTS`` times, ``BACKOFF_S`` doubling between
tries, each try logged (when, HTTP status or error, milliseconds).
"""
from __future__ import annotations

import fnmatch
import logging
import time
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.accounts.selectors import team_get
from controlplane.alerts.models import (AlertFiring, AlertRule, AlertState, Condition, Delivery, DeliveryStatus,
                                        Notification)
from controlplane.alerts import selectors
from controlplane.alerts.channels import channel, list_schema
from controlplane.alerts.channels.http import TIMEOUT_S
from controlplane.alerts.rules import MetricState, fold, verdict
from controlplane.common.errors import Conflict, FieldError, Forbidden, InvalidInput
from controlplane.common.validation import validate
from controlplane.runs.models import MetricPoint, Run, RunEvent, RunState

log = logging.getLogger(__name__)

MAX_RULES_PER_TEAM = 100
"""Each rule is evaluated after every step of every run of its team."""
TEST_EVERY_S = 10.0
"""A rule's test delivery may be sent again after this (a button held down floods nobody)."""
TESTS_PER_MINUTE = 6
"""Test deliveries one user may send in a minute, all rules together."""
TEST_BUDGET_S = 10.0
"""How long a test delivery's request tries receivers itself before it leaves the rest to a worker."""
MAX_KEYS_PER_RULE = 50
"""Metric keys one rule's glob watches in a run (the first, in key order): a glob like ``*`` must
not make every point of a step a firing."""
MAX_ATTEMPTS = 6
BACKOFF_S = 5.0
"""Seconds before the second try; doubled before each next one (5, 10, 20, 40, 80)."""
METRIC_CONDITIONS = (Condition.DROP, Condition.ABOVE, Condition.BELOW)
STALLED_KEY, EVENTS_KEY = "stalled", "events"

EVENT_KINDS = ("failed", "quarantine", "reward_hacking", "tampering", "paused", "preempted", "storage_error")
"""Run event kinds a rule is offered (any kind the system records is accepted, but ``alert``)."""

RULE_FIELDS = {
    "name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
    "condition": {"enum": [c.value for c in Condition]},
    "metric": {"type": "string", "maxLength": 200, "pattern": r"^[A-Za-z0-9_./@*?:-]*$",
               "description": "A metric key (reward/builtin-addition) or a glob (reward/*, infra_rate/*)"},
    "threshold": {"type": "number", "minimum": -1e12, "maximum": 1e12,
                  "description": "drop: how far from the best EMA; above/below: the bound; stalled: minutes"},
    "window": {"type": "integer", "minimum": 1, "maximum": 1000},
    "events": {"type": "array", "maxItems": 20, "uniqueItems": True,
               "items": {"type": "string", "pattern": r"^[a-z_]{1,64}$", "not": {"const": "alert"}}},
    "channels": list_schema(),
    "advice": {"type": "string", "maxLength": 2000,
               "description": "What the threshold is, where it comes from and what to try: sent with every firing"},
    "enabled": {"type": "boolean"},
}
RULE_CREATE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "condition", "channels"],
                      "properties": {"team": {"type": ["string", "null"], "maxLength": 100,
                                              "description": "A team slug; null: a default for every run (platform admins)"},
                                     **RULE_FIELDS}}
RULE_UPDATE_SCHEMA = {"type": "object", "additionalProperties": False, "minProperties": 1, "properties": RULE_FIELDS}


# -- rules ------------------------------------------------------------------------------------

def _rule_errors(data: dict, old: AlertRule | None, team_id: int | None) -> list[FieldError]:
    merged = {"condition": old.condition if old else "", "metric": old.metric if old else "",
              "threshold": old.threshold if old else 0.0, "events": old.events if old else []} | data
    errors = []
    cond = merged["condition"]
    if cond in METRIC_CONDITIONS and not merged["metric"]:
        errors.append(FieldError("metric", f"a {cond} rule needs a metric key or glob (reward/*)"))
    if cond == Condition.EVENT and not merged["events"]:
        errors.append(FieldError("events", "an event rule needs at least one event kind (failed, quarantine, ...)"))
    if cond == Condition.DROP and merged["threshold"] <= 0:
        errors.append(FieldError("threshold", "a drop is a positive distance from the best EMA"))
    if cond == Condition.STALLED and not 1 <= merged["threshold"] <= 7 * 24 * 60:
        errors.append(FieldError("threshold", "a stalled rule's threshold is minutes without a step, 1 to 10080"))
    seen: set[tuple[str, str]] = set()
    for i, ch in enumerate(data.get("channels") or []):
        kind = channel(ch["type"])
        target = (ch["type"], kind.key(ch))
        if target in seen:
            errors.append(FieldError(f"channels[{i}]", f"a second {ch['type']} channel to the same place"))
        seen.add(target)
        errors += kind.errors(ch, f"channels[{i}]", team_id)
    return errors


def _with_secrets(channels: list[dict], old: AlertRule | None) -> tuple[list[dict], list[FieldError]]:
    """The entries to store: each channel keeps what its kind keeps from the rule's old entries
    (a webhook without a secret keeps the one its URL had; a new URL needs one)."""
    out, errors = [], []
    for i, ch in enumerate(channels):
        kept, problems = channel(ch["type"]).kept(dict(ch), old.channels if old else [], f"channels[{i}]")
        out.append(kept)
        errors += problems
    return out, errors


def _require_edit(actor: Principal, team_id: int | None) -> None:
    if team_id is None:
        if not actor.platform_admin:
            raise Forbidden("only platform admins edit the default rules (those of every run)")
        return
    actor.require(team_id, "run.control", "team")


def editable(actor: Principal, team_id: int | None) -> bool:
    """Whether ``actor`` edits the rules of ``team_id`` (None: the defaults, platform admins)."""
    return actor.platform_admin if team_id is None else actor.can(team_id, "run.control")


def shown_target(kind: str, target: str, *, reveal: bool) -> str:
    """A delivery's target as someone who may not edit the rule sees it: a webhook or Slack URL
    is a credential (its path often is the token), addresses are people's.

    >>> shown_target("slack", "https://hooks.slack.com/services/T0/B0/XXXX", reveal=False)
    'https://hooks.slack.com/…'
    >>> shown_target("email", "a@x.test, b@x.test", reveal=False)
    '2 address(es)'
    """
    return channel(kind).shown(target, reveal)


def rule_out(rule: AlertRule, *, reveal: bool = False) -> dict:
    """A rule as the API and the pages show it: webhook secrets never leave the server; the
    URLs and addresses only to those who edit the rule (``reveal``)."""
    channels = [channel(c["type"]).out(c, reveal) for c in rule.channels]
    return {"id": rule.id, "team": rule.team.slug if rule.team_id else None, "name": rule.name, "condition": rule.condition,
            "metric": rule.metric, "threshold": rule.threshold, "window": rule.window, "events": list(rule.events),
            "channels": channels, "advice": rule.advice, "enabled": rule.enabled, "updated_at": rule.updated_at}


@transaction.atomic
def rule_create(*, actor: Principal, data: dict) -> AlertRule:
    validate(data, RULE_CREATE_SCHEMA)
    team = team_get(actor=actor, slug=data["team"]) if data.get("team") else None
    _require_edit(actor, team.id if team else None)
    channels, secret_errors = _with_secrets(data["channels"], None)
    if team is not None:
        Team.objects.select_for_update().filter(pk=team.pk).first()  # concurrent creates count one by one
    if team is not None and AlertRule.objects.filter(team=team).count() >= MAX_RULES_PER_TEAM:
        raise Conflict(f"team {team.slug} has {MAX_RULES_PER_TEAM} alert rules, the most a team may have; delete one first")
    errors = _rule_errors(data, None, team.id if team else None) + secret_errors
    if errors:
        raise InvalidInput(errors)
    fields = {k: v for k, v in data.items() if k != "team"} | {"channels": channels}
    rule = AlertRule.objects.create(team=team, created_by=actor.user, **fields)
    audit_record(actor=actor, obj=rule, action="alert_rule.create", after=rule_out(rule) | {"updated_at": None}, team=team)
    return rule


@transaction.atomic
def rule_update(*, actor: Principal, rule: AlertRule, data: dict) -> AlertRule:
    validate(data, RULE_UPDATE_SCHEMA)
    _require_edit(actor, rule.team_id)
    before = rule_out(rule) | {"updated_at": None}
    errors = _rule_errors(data, rule, rule.team_id)
    if "channels" in data:
        data = dict(data)
        data["channels"], secret_errors = _with_secrets(data["channels"], rule)
        errors += secret_errors
    if errors:
        raise InvalidInput(errors)
    changed_condition = any(k in data and data[k] != getattr(rule, k) for k in ("condition", "metric", "window", "events"))
    for k, v in data.items():
        setattr(rule, k, v)
    rule.save()
    if changed_condition:  # what the rule remembered was about another condition
        rule.states.all().delete()
    audit_record(actor=actor, obj=rule, action="alert_rule.update", before=before, after=rule_out(rule) | {"updated_at": None},
                 team=rule.team)
    return rule


@transaction.atomic
def rule_delete(*, actor: Principal, rule: AlertRule) -> None:
    _require_edit(actor, rule.team_id)
    audit_record(actor=actor, obj=rule, action="alert_rule.delete", before=rule_out(rule) | {"updated_at": None}, team=rule.team)
    rule.delete()


# -- evaluation -------------------------------------------------------------------------------

def rules_for(run: Run) -> list[AlertRule]:
    """The enabled rules that watch ``run``: its team's and the defaults."""
    rules = list(AlertRule.objects.filter(Q(team_id=run.team_id) | Q(team__isnull=True)).order_by("id"))
    own = {r.name for r in rules if r.team_id is not None}
    return [r for r in rules if r.enabled and (r.team_id is not None or r.name not in own)]


EVIDENCE = {"hack/canary_pass_rate/": "canary", "hack/tamper_rate/": "tampered", "hack/regrade_disagreement/": "regrade"}
"""Metric key prefixes whose firings point at the trajectories that are the evidence (the explorer's flag)."""


def chart_path(run: Run, step: int, key: str = "") -> str:
    """Where a firing points: the run page at that step, with the metric's chart; for the
    reward-hacking watch's metrics, the trajectory explorer on that step's flagged trajectories."""
    for prefix, flag in EVIDENCE.items():
        if key.startswith(prefix):
            query = urlencode({"t.step": step, "t.domain": key.removeprefix(prefix), "t.flag": flag})
            return f"/runs/{run.id}/?{query}#trajectories"
    return f"/runs/{run.id}/?step={step}" + (f"&metric={quote(key, safe='/')}" if key else "") + "#charts"


def absolute(path: str) -> str:
    return settings.TEMPER_PUBLIC_URL.rstrip("/") + path


def _state(rule: AlertRule, run: Run, key: str) -> AlertState:
    state, created = AlertState.objects.select_for_update().get_or_create(rule=rule, run=run, key=key)
    if created and key == EVENTS_KEY:  # a rule looks at events from when it first sees the run
        state.last_event_id = 0 if rule.created_at <= (run.started_at or run.created_at) else (
            RunEvent.objects.filter(run=run, at__lt=rule.created_at).aggregate(m=Max("id"))["m"] or 0)
    return state


@transaction.atomic
def alerts_after_step(*, run: Run, step: int) -> list[AlertFiring]:
    """Evaluate every rule of ``run`` on what its steps up to ``step`` wrote; fire or resolve."""
    fired: list[AlertFiring] = []
    rules = rules_for(run)
    if not rules:
        return fired
    keys_now = list(MetricPoint.objects.filter(run=run, step=step).values_list("key", flat=True))
    for rule in rules:
        if rule.condition in METRIC_CONDITIONS:
            for key in sorted(k for k in keys_now if fnmatch.fnmatchcase(k, rule.metric))[:MAX_KEYS_PER_RULE]:
                fired += _metric(rule, run, key, step)
        elif rule.condition == Condition.STALLED:
            state = AlertState.objects.filter(rule=rule, run=run, key=STALLED_KEY, firing=True).first()
            if state is not None:
                _resolve(state, step, f"run {run.name} steps again (step {step})")
        elif rule.condition == Condition.EVENT:
            fired += _events(rule, run)
    return fired


def _metric(rule: AlertRule, run: Run, key: str, step: int) -> list[AlertFiring]:
    state = _state(rule, run, key)
    new = list(MetricPoint.objects.filter(run=run, key=key, step__gt=state.last_step, step__lte=step)
               .order_by("step").values_list("step", "value", "domain"))
    if not new:
        return []
    folded = MetricState(state.ema, state.best, state.points, list(state.recent))
    for values in _by_level(run, new, since=state.last_step) if rule.condition == Condition.DROP else [[v for _, v, _ in new]]:
        if values is None:  # the domain's curriculum moved to another level: a new baseline
            folded = MetricState()
            continue
        folded = fold(folded, rule.condition, rule.window, values)
    state.ema, state.best, state.points, state.recent = folded.ema, folded.best, folded.points, folded.recent
    state.last_step = new[-1][0]
    holds, value = verdict(folded, rule.condition, rule.window, rule.threshold, firing=state.firing)
    out = []
    if holds and not state.firing:
        state.firing = True
        out.append(_fire(rule, run, key, state.last_step, value, _metric_message(rule, run, key, value, folded)))
    elif state.firing and not holds:
        _resolve(state, state.last_step, f"{key} is back within the rule ({value})", save=False)
    state.save()
    return out


def _by_level(run: Run, new: list[tuple[int, float, str]], *, since: int) -> list[list[float] | None]:
    """A domain metric's new values split where the domain's curriculum level changed (a None
    between the runs of values): a harder level lowers the reward by design, so a drop rule starts
    its EMA and best afresh there instead of calling it a collapse.

    The split is at the first step whose batch was sampled at the new level. The level is recorded
    on the step at whose end the sampler moved it, so the next batch sampled is the first at the
    new level: the step after, or ``rollout.staleness`` steps later still when batches are
    generated ahead (the batch trained at step S+1 was sampled while step S ran)."""
    domain = new[-1][2]
    if not domain:
        return [[v for _, v, _ in new]]
    lag = 1 + max(run.staleness or 0, 0)
    levels = list(MetricPoint.objects.filter(run=run, key=f"sampler/level/{domain}", step__gte=since - lag,
                                             step__lte=new[-1][0]).order_by("step").values_list("step", "value"))
    starts = {step_ + lag for (_, before), (step_, level) in zip(levels, levels[1:]) if level != before}
    out: list[list[float] | None] = [[]]
    for step_, value, _ in new:
        if step_ in starts and out[-1]:
            out += [None, []]
        elif step_ in starts:  # the first new value of this call starts the new level: still a new baseline
            out = [None, []]
        out[-1].append(value)
    return out


def _metric_message(rule: AlertRule, run: Run, key: str, value: float | None, state: MetricState) -> str:
    if rule.condition == Condition.DROP:
        return (f"{rule.name}: {key} of run {run.name} fell to {value:.4g} (EMA over {rule.window} steps), "
                f"{state.best - state.ema:.4g} below its best {state.best:.4g}" + (f". {rule.advice}" if rule.advice else ""))
    word = "above" if rule.condition == Condition.ABOVE else "below"
    return (f"{rule.name}: {key} of run {run.name} is {value:.4g} over the last {rule.window} step(s), {word} {rule.threshold:g}"
            + (f". {rule.advice}" if rule.advice else ""))


def _events(rule: AlertRule, run: Run) -> list[AlertFiring]:
    state = _state(rule, run, EVENTS_KEY)
    out = []
    for event in RunEvent.objects.filter(run=run, id__gt=state.last_event_id).exclude(kind__startswith="alert").order_by("id"):
        state.last_event_id = event.id
        if event.kind in rule.events:
            step = int((event.data or {}).get("step") or run.current_step)
            firing = _fire(rule, run, event.kind, step, None, f"{rule.name}: run {run.name}: {event.kind}: {event.message}"[:4000],
                           event=event)
            firing.resolved_at, firing.resolved_step = firing.at, step  # an occurrence: nothing to resolve
            firing.save(update_fields=["resolved_at", "resolved_step"])
            out.append(firing)
    state.save()
    return out


def _resolve(state: AlertState, step: int, message: str, *, save: bool = True) -> None:
    state.firing = False
    if save:
        state.save(update_fields=["firing"])
    now = timezone.now()
    for firing in AlertFiring.objects.filter(rule_id=state.rule_id, run_id=state.run_id, key=state.key, resolved_at__isnull=True):
        firing.resolved_at, firing.resolved_step = now, step
        firing.save(update_fields=["resolved_at", "resolved_step"])
        RunEvent.objects.create(run_id=state.run_id, kind="alert_resolved", message=f"{state.rule.name}: {message}",
                                data={"rule": state.rule_id, "firing": firing.id, "key": state.key, "step": step})


def _fire(rule: AlertRule, run: Run, key: str, step: int, value: float | None, message: str,
          event: RunEvent | None = None) -> AlertFiring:
    """Record a firing (with an ``alert`` run event, unless it fires on an event already on the
    run's list) and send it through the rule's channels once the transaction commits."""
    path = chart_path(run, step, key if rule.condition in METRIC_CONDITIONS else "")
    if event is None:
        event = RunEvent.objects.create(run=run, kind="alert", message=message,
                                        data={"rule": rule.id, "rule_name": rule.name, "condition": rule.condition, "key": key,
                                              "step": step, "value": value, "url": path})
    firing = AlertFiring.objects.create(rule=rule, run=run, key=key, step=step, value=value, message=message, event=event)
    if event.kind == "alert":
        event.data["firing"] = firing.id
        event.save(update_fields=["data"])
    payload = _payload("alert.fired", rule, run, key=key, step=step, value=value, message=message, url=absolute(path),
                       firing=firing.id)
    for slot, entry in enumerate(rule.channels):
        kind = channel(entry["type"])
        if not kind.delivered:
            kind.notify(firing=firing, run=run, message=message, path=path)
            continue
        delivery = Delivery.objects.create(rule=rule, firing=firing, channel=kind.kind, target=kind.target(entry),
                                           payload=payload | {"slot": slot})
        dispatch.send_on_commit("temper.notify.deliver", delivery.id)
    log.info("alert %s fired for run %s at step %s: %s", rule.id, run.id, step, message)
    return firing


def _payload(kind: str, rule: AlertRule, run: Run | None, **fields: Any) -> dict:
    return {"type": kind, "rule": {"id": rule.id, "name": rule.name, "condition": rule.condition, "metric": rule.metric,
                                   "threshold": rule.threshold, "window": rule.window},
            "run": ({"id": run.id, "name": run.name, "team": run.team.slug, "state": run.state} if run else None),
            "at": timezone.now().isoformat(), **fields}


def alerts_sweep(*, now=None) -> dict:
    """What no step announces: stalled runs, events of runs that stopped stepping, retries due."""
    now = now or timezone.now()
    fired = 0
    for rule in AlertRule.objects.filter(enabled=True, condition__in=[Condition.STALLED, Condition.EVENT]).order_by("id"):
        runs = Run.objects.filter(team_id=rule.team_id) if rule.team_id else Run.objects.all()
        if rule.condition == Condition.STALLED:
            fired += _stalled(rule, runs.filter(state=RunState.RUNNING), now)
            for state in AlertState.objects.filter(rule=rule, key=STALLED_KEY, firing=True).exclude(run__state=RunState.RUNNING):
                with transaction.atomic():
                    _resolve(state, state.run.current_step, f"run {state.run.name} is {state.run.state}")
        else:
            recent = runs.filter(Q(state__in=[RunState.RUNNING, RunState.PAUSED, RunState.QUEUED]) |
                                 Q(finished_at__gte=now - timedelta(hours=1)))
            for run in recent.filter(events__id__gt=0).distinct():
                with transaction.atomic():
                    fired += len(_events(rule, run))
    due = list(Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now).values_list("id", flat=True)[:500])
    for delivery_id in due:  # tried on the notify queue (the claim makes a second send harmless)
        dispatch.send("temper.notify.deliver", delivery_id)
    return {"fired": fired, "resent": len(due)}


def _stalled(rule: AlertRule, runs, now) -> int:
    fired = 0
    minutes = rule.threshold
    # A run's newest point by id (the (run, id) index), not the max over all of its points.
    newest = MetricPoint.objects.filter(run=OuterRef("pk")).order_by("-id").values("time")[:1]
    for run in runs.annotate(last_point=Subquery(newest)):
        last = max(t for t in (run.last_point, run.started_at) if t is not None) if (run.last_point or run.started_at) else None
        if last is None or (now - last).total_seconds() < minutes * 60:
            continue
        with transaction.atomic():
            state = _state(rule, run, STALLED_KEY)
            if state.firing:
                continue
            state.firing = True
            state.save()
            idle = (now - last).total_seconds() / 60
            _fire(rule, run, STALLED_KEY, run.current_step, round(idle, 2),
                  f"{rule.name}: run {run.name} has written no step for {idle:.0f} minutes (last at step {run.current_step})")
            fired += 1
    return fired


# -- delivery ---------------------------------------------------------------------------------

def deliver(delivery_id: int) -> Delivery | None:
    """Try one delivery once, if it is due and nobody else is trying it (the claim is one UPDATE);
    None when it was not ours to try."""
    now = timezone.now()
    claimed = Delivery.objects.filter(id=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now).update(
        attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=TIMEOUT_S * 6))
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("rule").get(id=delivery_id)
    slot = delivery.payload.get("slot", -1)
    channels = delivery.rule.channels
    entry = channels[slot] if 0 <= slot < len(channels) else None
    t0 = time.monotonic()
    code, error = None, ""
    if entry is None or entry["type"] != delivery.channel or channel(entry["type"]).target(entry) != delivery.target:
        error = "the rule's channel was changed or removed since this alert fired"
    else:
        try:
            payload = {k: v for k, v in delivery.payload.items() if k != "slot"} | {"id": delivery.id}
            code = channel(delivery.channel).send(delivery, entry, payload)
            if code is not None and not 200 <= code < 300:
                error = f"the receiver answered HTTP {code}"
        except Exception as exc:  # noqa: BLE001 - a receiver's failure is the delivery's outcome, logged
            error = f"{type(exc).__name__}: {exc}"[:1000]
    entry = {"at": timezone.now().isoformat(), "attempt": delivery.attempts, "code": code, "error": error,
             "ms": round((time.monotonic() - t0) * 1000, 1)}
    delivery.log = (delivery.log + [entry])[-MAX_ATTEMPTS * 2:]
    delivery.last_code, delivery.last_error = code, error
    if not error:
        delivery.status, delivery.sent_at = DeliveryStatus.SENT, timezone.now()
    elif entry is None or delivery.attempts >= MAX_ATTEMPTS or delivery.firing_id is None:
        delivery.status = DeliveryStatus.FAILED  # a test delivery is tried once: its answer is the point
    else:
        wait = BACKOFF_S * 2 ** (delivery.attempts - 1)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=wait)
        transaction.on_commit(lambda: dispatch.send("temper.notify.deliver", delivery_id, countdown=wait))
    delivery.save(update_fields=["log", "last_code", "last_error", "status", "sent_at", "next_attempt_at"])
    return delivery


def _test_allowed(actor: Principal, rule: AlertRule) -> None:
    """One test of a rule every ``TEST_EVERY_S``, and at most ``TESTS_PER_MINUTE`` by one user
    (in Django's cache: Redis in production, shared by every web process)."""
    if not cache.add(f"temper:alert-test:{rule.id}:{rule.created_at.timestamp()}", 1, timeout=TEST_EVERY_S):
        raise Conflict(f"a test of this rule was sent less than {TEST_EVERY_S:.0f} s ago; try again in a few seconds")
    if actor.user is not None:
        key = f"temper:alert-tests-by:{actor.user.pk}:{actor.user.date_joined.timestamp()}"
        cache.add(key, 0, timeout=60)
        if cache.incr(key) > TESTS_PER_MINUTE:
            raise Conflict(f"you sent {TESTS_PER_MINUTE} test deliveries in the last minute; wait a minute")


def rule_test_delivery(*, actor: Principal, rule: AlertRule) -> list[Delivery]:
    """Send a test alert through every channel of ``rule`` now (one try each, within
    ``TEST_BUDGET_S`` for all: what is left goes to the notify queue) and return the deliveries
    with their answers; the in-app channel notifies the actor. Nothing is locked while a
    receiver is waited for."""
    _require_edit(actor, rule.team_id)
    _test_allowed(actor, rule)
    message = f"Test of alert rule {rule.name!r}: this is what a firing sends."
    with transaction.atomic():
        ids = []
        for slot, entry in enumerate(rule.channels):
            kind = channel(entry["type"])
            if not kind.delivered:
                kind.notify_test(user=actor.user, message=message)
                continue
            ids.append(Delivery.objects.create(rule=rule, channel=kind.kind, target=kind.target(entry),
                                               payload=_payload("alert.test", rule, None, message=message,
                                                                url=absolute("/alerts/"), slot=slot)).id)
    started, out = time.monotonic(), []
    for delivery_id in ids:
        if time.monotonic() - started < TEST_BUDGET_S:
            out.append(deliver(delivery_id) or Delivery.objects.get(pk=delivery_id))
        else:  # the request has waited long enough: a notify worker tries the rest
            dispatch.send("temper.notify.deliver", delivery_id)
            out.append(Delivery.objects.get(pk=delivery_id))
    return out


def notifications_read(*, actor: Principal, ids: list[int] | None = None) -> int:
    """Mark the actor's notifications read (``ids``, or all it sees); how many changed."""
    qs = Notification.objects.filter(pk__in=selectors.notifications(actor=actor).filter(read_at__isnull=True).values("pk"))
    if ids is not None:
        qs = qs.filter(id__in=ids)
    return qs.update(read_at=timezone.now())
