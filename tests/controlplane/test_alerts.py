"""Alerts: rules fire once when their condition holds (within the step), stay quiet until resolved,
and reach a real local HTTP receiver signed (HMAC over timestamp and body), Slack-shaped, by
e-mail and in-app; failed deliveries are retried with backoff and logged; stalled runs and events
fire from the sweep; rules are validated (every error at once) and confined to their team."""
from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta
from importlib import import_module

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from controlplane import dispatch
from controlplane.alerts import services
from controlplane.alerts.models import AlertFiring, AlertRule, Delivery, Notification
from controlplane.runs.models import MetricPoint, Run, RunEvent
from tests import factories
from tests.alerts_receiver import Receiver

pytestmark = pytest.mark.django_db

SECRET = "s3cret-for-the-receiver"
KEY = "reward/addition"


@pytest.fixture
def sent(monkeypatch, django_capture_on_commit_callbacks):
    """Tasks the services send, in order; no broker (the tests run what the worker would)."""
    out: list[tuple[str, tuple]] = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: out.append((name, args)))
    return out


@pytest.fixture
def quiet(world):
    """Only the rules a test makes: the defaults (every run's) are tested on their own."""
    AlertRule.objects.filter(team__isnull=True).delete()
    return world


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def running(team, name="r"):
    run = factories.run(team, state="running", budget_steps=100, name=name)
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now())
    run.refresh_from_db()
    return run


def rule(team, **fields):
    data = {"name": "collapse", "condition": "drop", "metric": KEY, "threshold": 0.3, "window": 3,
            "channels": [{"type": "in_app"}]} | fields
    return AlertRule.objects.create(team=team, **data)


def step(run, n, values: dict[str, float]):
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=n, key=k, value=v) for k, v in values.items()])
    return services.alerts_after_step(run=run, step=n)


def deliver_sent(sent):
    """Run the deliveries the services asked for, as the control worker does."""
    while sent:
        name, args = sent.pop(0)
        assert name == "temper.notify.deliver"
        services.deliver(*args)


def first_collapse(series: list[float], window: int, threshold: float) -> int:
    """The first step (1-based) at which the EMA is `threshold` below its best, computed here."""
    a, ema, best = 2 / (window + 1), None, None
    for i, v in enumerate(series, start=1):
        ema = v if ema is None else a * v + (1 - a) * ema
        best = ema if best is None else max(best, ema)
        if i >= window and best - ema >= threshold:
            return i
    raise AssertionError("no collapse in the series")


def test_a_reward_collapse_fires_one_signed_webhook_in_the_step_it_holds_linked_to_the_chart(quiet, sent, django_capture_on_commit_callbacks):
    run = running(quiet.team)
    rule(quiet.team, channels=[{"type": "webhook", "url": "", "secret": SECRET}, {"type": "in_app"}])
    series = [0.8] * 6 + [0.1] * 8
    expected = first_collapse(series, 3, 0.3)
    with Receiver() as receiver:
        AlertRule.objects.filter(team=quiet.team).update(channels=[{"type": "webhook", "url": receiver.url, "secret": SECRET},
                                                                   {"type": "in_app"}])
        fired_at = []
        for n, v in enumerate(series, start=1):
            with django_capture_on_commit_callbacks(execute=True):
                if step(run, n, {KEY: v, "reward/mean": 0.5}):
                    fired_at.append(n)
            deliver_sent(sent)
        assert fired_at == [expected]
        assert len(receiver.requests) == 1
        request = receiver.requests[0]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    mac = hmac.new(SECRET.encode(), headers["x-temper-timestamp"].encode() + b"." + request["body"], hashlib.sha256)
    assert headers["x-temper-signature"] == "sha256=" + mac.hexdigest()
    body = request["json"]
    assert (body["type"], body["step"], body["key"], body["run"]["id"]) == ("alert.fired", expected, KEY, run.id)
    assert body["url"].endswith(f"/runs/{run.id}/?step={expected}&metric={KEY}#charts")
    event = RunEvent.objects.get(run=run, kind="alert")
    assert event.data["step"] == expected and event.data["url"] in body["url"]
    page = client_for(quiet.users["viewer"]).get(event.data["url"].split("#")[0])
    assert page.status_code == 200
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_code) == ("sent", 1, 200)
    assert Notification.objects.filter(firing__run=run).count() == 4  # every member of the team


def test_a_firing_stays_quiet_until_resolved_then_fires_again(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team)
    series = [0.9] * 5 + [0.1] * 5 + [0.9] * 8 + [0.1] * 5
    fired = [n for n, v in enumerate(series, start=1) if step(run, n, {KEY: v})]
    assert len(fired) == 2 and fired[0] < 11 and fired[1] > 18
    resolved = RunEvent.objects.filter(run=run, kind="alert_resolved")
    assert resolved.count() == 1
    firings = list(AlertFiring.objects.filter(run=run).order_by("at"))
    assert firings[0].resolved_step is not None and 10 < firings[0].resolved_step <= 18 and firings[1].resolved_at is None


def record_levels(run, key: str, level_key: str, levels: list[int], rewards: list[float]) -> list[int]:
    """Record a domain's reward and curriculum level step by step; the steps an alert fired at."""
    fired = []
    for n, (level, v) in enumerate(zip(levels, rewards), start=1):
        MetricPoint.objects.bulk_create([MetricPoint(run=run, step=n, key=key, domain="builtin-parity", value=v),
                                         MetricPoint(run=run, step=n, key=level_key, domain="builtin-parity", value=level)])
        if services.alerts_after_step(run=run, step=n):
            fired.append(n)
    return fired


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_curriculum_level_up_is_a_new_baseline_not_a_collapse(quiet, sent, staleness):
    """A domain moved to a harder level earns less by design: the drop rule starts afresh at the
    first step sampled at the new level, and still fires on a collapse within the level. The
    demo's own pattern: the level is recorded on the step at whose end it changed (step 6 here),
    and the reward falls from the first batch sampled after it (step 7, or 8 when batches are
    generated one step ahead)."""
    run = running(quiet.team)
    Run.objects.filter(pk=run.pk).update(staleness=staleness)
    run.refresh_from_db()
    rule(quiet.team, metric="reward/*")
    key, level_key = "reward/builtin-parity", "sampler/level/builtin-parity"
    first_new = 7 + staleness
    levels = [0] * 5 + [1] * 19
    rewards = [0.9] * (first_new - 1) + [0.3] * 6 + [0.7] * 6 + [0.05] * (25 - first_new - 12)
    fired = record_levels(run, key, level_key, levels, rewards)
    assert len(fired) == 1 and fired[0] > first_new + 11, fired  # the collapse within level 1, nothing at the level-up
    # The same series without the level change is a collapse at the level-up.
    other = running(quiet.team, name=f"no-curriculum-{staleness}")
    fired = [n for n, v in enumerate(rewards, start=1)
             if MetricPoint.objects.create(run=other, step=n, key=key, domain="builtin-parity", value=v)
             and services.alerts_after_step(run=other, step=n)]
    assert fired and fired[0] <= first_new + 5


def test_a_drop_before_the_first_step_at_a_new_level_is_a_collapse(quiet, sent):
    """The split is no licence to drop: rewards that fall while the batches are still sampled at
    the old level fire the rule, even with a level change recorded soon after."""
    run = running(quiet.team)
    rule(quiet.team, metric="reward/*")
    key, level_key = "reward/builtin-parity", "sampler/level/builtin-parity"
    # The level is recorded changed at step 8 (its batches from step 9 at the new level), while the
    # reward already fell at step 7: a drop within level 0 as the rule sees it, which it reports.
    levels = [0] * 7 + [1] * 10
    rewards = [0.9] * 6 + [0.2] * 11
    fired = record_levels(run, key, level_key, levels, rewards)
    assert fired and fired[0] <= 9, fired


def test_above_below_and_globs_watch_each_matching_key(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team, name="infra", condition="above", metric="infra_rate/*", threshold=0.25, window=2)
    rule(quiet.team, name="entropy", condition="below", metric="policy/entropy", threshold=0.05, window=2)
    step(run, 1, {"infra_rate/a": 0.5, "infra_rate/b": 0.0, "policy/entropy": 1.0})
    fired = step(run, 2, {"infra_rate/a": 0.5, "infra_rate/b": 0.1, "policy/entropy": 0.01})
    assert [f.key for f in fired] == ["infra_rate/a"]  # entropy's mean over 2 steps is still above 0.05
    fired = step(run, 3, {"infra_rate/a": 0.5, "infra_rate/b": 0.6, "policy/entropy": 0.01})
    assert sorted(f.key for f in fired) == ["infra_rate/b", "policy/entropy"]  # b's mean is 0.35 now
    assert step(run, 4, {"infra_rate/a": 0.5, "infra_rate/b": 0.6, "policy/entropy": 0.01}) == []  # all firing already


def test_non_finite_values_never_move_a_rule():
    from controlplane.alerts.rules import MetricState, fold, verdict

    state = fold(MetricState(), "above", 1, [float("nan"), float("inf"), float("-inf")])
    assert state == MetricState() and verdict(state, "above", 1, 0.5, firing=False) == (False, None)
    assert verdict(fold(state, "above", 1, [0.9, float("nan")]), "above", 1, 0.5, firing=False) == (True, 0.9)


def test_failed_deliveries_are_retried_with_backoff_logged_and_given_up(quiet, sent, django_capture_on_commit_callbacks):
    run = running(quiet.team)
    with Receiver(codes=[500, 503]) as receiver:
        rule(quiet.team, condition="above", threshold=0.5, window=1, channels=[{"type": "webhook", "url": receiver.url, "secret": SECRET}])
        with django_capture_on_commit_callbacks(execute=True):
            step(run, 1, {KEY: 0.9})
        (name, (delivery_id,)), = sent
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            d = services.deliver(delivery_id)
        assert (d.status, d.attempts, d.last_code) == ("pending", 1, 500)
        assert sent and sent[0][0] == "temper.notify.deliver"  # sent again, with a countdown
        wait = (d.next_attempt_at - timezone.now()).total_seconds()
        assert services.BACKOFF_S - 1 < wait <= services.BACKOFF_S
        assert services.deliver(delivery_id) is None  # not due yet: a second worker takes nothing
        Delivery.objects.filter(pk=delivery_id).update(next_attempt_at=timezone.now())
        d = services.deliver(delivery_id)
        assert (d.status, d.attempts, d.last_code) == ("pending", 2, 503)
        assert (d.next_attempt_at - timezone.now()).total_seconds() > services.BACKOFF_S * 2 - 1
        Delivery.objects.filter(pk=delivery_id).update(next_attempt_at=timezone.now())
        sent.clear()
        assert services.alerts_sweep()["resent"] == 1  # the sweep sends what is due to the notify queue
        deliver_sent(sent)
        d.refresh_from_db()
        assert (d.status, d.attempts, d.last_code) == ("sent", 3, 200)
        assert [e["code"] for e in d.log] == [500, 503, 200]
        assert len(receiver.requests) == 3 and len({r["headers"]["X-Temper-Delivery"] for r in receiver.requests}) == 1
    dead = Delivery.objects.create(rule=d.rule, firing=d.firing, channel="webhook", target="http://127.0.0.1:9/hook",
                                   payload=d.payload, attempts=services.MAX_ATTEMPTS - 1)
    AlertRule.objects.filter(pk=d.rule_id).update(channels=[{"type": "webhook", "url": "http://127.0.0.1:9/hook", "secret": SECRET}])
    d = services.deliver(dead.id)
    assert d.status == "failed" and "Error" in d.last_error


def test_slack_and_email_channels(quiet, sent, django_capture_on_commit_callbacks, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    type(quiet.users["member"]).objects.filter(pk=quiet.users["member"].pk).update(email="oncall@example.com")
    run = running(quiet.team, name="nightly <!channel>")
    with Receiver() as receiver:
        rule(quiet.team, condition="above", threshold=0.5, window=1,
             channels=[{"type": "slack", "url": receiver.url}, {"type": "email", "to": ["oncall@example.com"]}])
        with django_capture_on_commit_callbacks(execute=True):
            step(run, 1, {KEY: 0.9})
        deliver_sent(sent)
        (slack,) = receiver.requests
    assert set(slack["json"]) == {"text"} and "nightly &lt;!channel&gt;" in slack["json"]["text"] and "<!channel>" not in slack["json"]["text"]
    assert f"/runs/{run.id}/?step=1" in slack["json"]["text"]
    (message,) = mail.outbox
    assert message.to == ["oncall@example.com"] and "nightly" in message.subject and f"/runs/{run.id}/?step=1" in message.body
    assert set(Delivery.objects.values_list("status", flat=True)) == {"sent"}


def test_in_app_notifications_show_an_unread_count_and_are_marked_read(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team, condition="above", threshold=0.5, window=1)
    step(run, 1, {KEY: 0.9})
    viewer = client_for(quiet.users["viewer"])
    page = viewer.get("/")
    assert b'data-testid="unread-count">1<' in page.content
    listing = viewer.get("/api/notifications").json()
    assert listing["unread"] == 1 and listing["items"][0]["url"].startswith(f"/runs/{run.id}/?step=1")
    assert client_for(quiet.other_users["admin"]).get("/api/notifications").json()["unread"] == 0
    assert viewer.post("/api/notifications/read", {}, content_type="application/json").json() == {"marked": 1, "unread": 0}
    assert b'data-testid="unread-count"' not in viewer.get("/").content
    assert b"collapse" in viewer.get("/notifications/").content


def test_a_stalled_run_fires_from_the_sweep_once_and_resolves_when_it_steps(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team, name="stalled", condition="stalled", metric="", threshold=20)
    step(run, 1, {KEY: 0.5})
    MetricPoint.objects.filter(run=run).update(time=timezone.now() - timedelta(minutes=30))
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(hours=1), current_step=1)
    assert services.alerts_sweep()["fired"] == 1
    assert services.alerts_sweep()["fired"] == 0
    firing = AlertFiring.objects.get(run=run)
    assert firing.key == "stalled" and firing.value >= 29
    step(run, 2, {KEY: 0.5})
    firing.refresh_from_db()
    assert firing.resolved_step == 2
    fresh = running(quiet.team, name="fresh")  # started now, no step yet: not stalled
    assert services.alerts_sweep()["fired"] == 0 and not AlertFiring.objects.filter(run=fresh).exists()


def test_event_rules_fire_on_the_events_themselves(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team, name="ops", condition="event", metric="", events=["quarantine", "failed"])
    RunEvent.objects.create(run=run, kind="quarantine", message="domain x quarantined", data={"domain": "x", "step": 3})
    RunEvent.objects.create(run=run, kind="weights", message="weights changed")
    fired = step(run, 3, {KEY: 0.5})
    assert [(f.key, f.step) for f in fired] == [("quarantine", 3)]
    assert fired[0].event.kind == "quarantine" and not RunEvent.objects.filter(run=run, kind="alert").exists()
    assert step(run, 4, {KEY: 0.5}) == []  # seen once
    RunEvent.objects.create(run=run, kind="failed", message="RuntimeError: boom")
    Run.objects.filter(pk=run.pk).update(state="failed", finished_at=timezone.now())
    assert services.alerts_sweep()["fired"] == 1  # a run that no longer steps: the sweep sees its end


def test_rules_are_validated_with_every_error_at_once(quiet, settings):
    admin = client_for(quiet.users["admin"])
    bad = admin.post("/api/alerts/rules", {"team": "acme", "name": "x", "condition": "drop", "threshold": 0,
                                           "channels": [{"type": "webhook", "url": "ftp://h/x"}]}, content_type="application/json")
    assert bad.status_code == 422
    paths = {e["path"] for e in bad.json()["errors"]}
    assert {"metric", "threshold", "channels[0].url", "channels[0].secret"} <= paths
    for body, path in [({"condition": "sometimes"}, "condition"), ({"window": 0}, "window"), ({"events": ["alert"]}, "events[0]"),
                       ({"channels": [{"type": "pager"}]}, "channels[0].type"), ({"colour": "red"}, "colour"),
                       ({"channels": [{"type": "email", "to": ["not-an-address"]}]}, "channels[0].to[0]")]:
        r = admin.post("/api/alerts/rules", {"team": "acme", "name": "x", "condition": "above", "metric": KEY,
                                             "channels": [{"type": "in_app"}]} | body, content_type="application/json")
        assert r.status_code == 422, body
        assert path in {e["path"] for e in r.json()["errors"]}, (body, r.json())
    r = admin.post("/api/alerts/rules", '{"team": "acme", "name": "x", "condition": "above", "metric": "k", "threshold": NaN, '
                                        '"channels": [{"type": "in_app"}]}', content_type="application/json")
    assert r.status_code == 422
    settings.TEMPER_ALERT_ALLOW_PRIVATE = False
    for host in ("127.0.0.1", "10.0.0.8", "[::1]", "localhost", "169.254.169.254"):
        r = admin.post("/api/alerts/rules", {"team": "acme", "name": "x", "condition": "above", "metric": KEY,
                                             "channels": [{"type": "slack", "url": f"http://{host}/x"}]}, content_type="application/json")
        assert r.status_code == 422 and r.json()["errors"][0]["path"] == "channels[0].url", host
    assert AlertRule.objects.filter(team__isnull=False).count() == 0  # nothing saved


def test_email_goes_to_team_members_or_allowed_domains_only(quiet, settings):
    type(quiet.users["viewer"]).objects.filter(pk=quiet.users["viewer"].pk).update(email="vera@acme.test")
    type(quiet.other_users["admin"]).objects.filter(pk=quiet.other_users["admin"].pk).update(email="gina@globex.test")
    admin = client_for(quiet.users["admin"])

    def create(to):
        return admin.post("/api/alerts/rules", {"team": "acme", "name": "mail", "condition": "stalled", "threshold": 30,
                                                "channels": [{"type": "email", "to": to}]}, content_type="application/json")

    assert create(["Vera@acme.test"]).status_code == 201
    refused = create(["vera@acme.test", "gina@globex.test", "anyone@spam.test"])
    assert refused.status_code == 422 and [e["path"] for e in refused.json()["errors"]] == ["channels[0].to[1]", "channels[0].to[2]"]
    settings.TEMPER_ALERT_EMAIL_DOMAINS = ["spam.test"]
    assert create(["anyone@spam.test"]).status_code == 201


def test_a_team_has_a_bounded_number_of_rules_and_tests_are_rate_limited(quiet, monkeypatch):
    monkeypatch.setattr(services, "MAX_RULES_PER_TEAM", 2)
    admin = client_for(quiet.users["admin"])
    body = {"team": "acme", "name": "r", "condition": "stalled", "threshold": 30, "channels": [{"type": "slack", "url": "http://127.0.0.1:9/x"}]}
    ids = [admin.post("/api/alerts/rules", body, content_type="application/json").json()["id"] for _ in range(2)]
    third = admin.post("/api/alerts/rules", body, content_type="application/json")
    assert third.status_code == 409 and "2 alert rules" in third.json()["detail"]
    assert admin.post(f"/api/alerts/rules/{ids[0]}/test").status_code == 200
    again = admin.post(f"/api/alerts/rules/{ids[0]}/test")
    assert again.status_code == 409 and "less than 10 s ago" in again.json()["detail"]
    assert admin.post(f"/api/alerts/rules/{ids[1]}/test").status_code == 200  # per rule


def test_a_private_address_is_refused_at_delivery_too(quiet, settings):
    settings.TEMPER_ALERT_ALLOW_PRIVATE = False
    run = running(quiet.team)
    r = rule(quiet.team, channels=[{"type": "slack", "url": "http://localhost.test.invalid/x"}])
    d = Delivery.objects.create(rule=r, firing=AlertFiring.objects.create(rule=r, run=run, key=KEY, step=1, message="m"),
                                channel="slack", target="http://localhost.test.invalid/x", payload={"slot": 0, "message": "m"})
    AlertRule.objects.filter(pk=r.pk).update(channels=[{"type": "slack", "url": "http://127.0.0.1:9/x"}])
    d.target = "http://127.0.0.1:9/x"
    d.save()
    d = services.deliver(d.id)
    assert d.status == "pending" and "not public" in d.last_error


def test_rules_belong_to_their_team_and_secrets_never_leave(quiet):
    body = {"team": "acme", "name": "mine", "condition": "above", "metric": KEY, "threshold": 0.5,
            "channels": [{"type": "webhook", "url": "https://hooks.example.com/t", "secret": SECRET}]}
    assert client_for(quiet.users["viewer"]).post("/api/alerts/rules", body, content_type="application/json").status_code == 403
    created = client_for(quiet.users["member"]).post("/api/alerts/rules", body, content_type="application/json")
    assert created.status_code == 201 and SECRET not in created.content.decode()
    rid = created.json()["id"]
    assert created.json()["channels"] == [{"type": "webhook", "url": "https://hooks.example.com/t", "secret_set": True}]
    other = client_for(quiet.other_users["admin"])
    assert other.get(f"/api/alerts/rules/{rid}").status_code == 404
    assert other.patch(f"/api/alerts/rules/{rid}", {"enabled": False}, content_type="application/json").status_code == 404
    assert other.post("/api/alerts/rules", body, content_type="application/json").status_code == 404
    member = client_for(quiet.users["member"])
    kept = member.patch(f"/api/alerts/rules/{rid}", {"channels": [{"type": "webhook", "url": "https://hooks.example.com/t"}]},
                        content_type="application/json")
    assert kept.status_code == 200 and AlertRule.objects.get(pk=rid).channels[0]["secret"] == SECRET  # kept
    default = AlertRule.objects.create(team=None, name="d", condition="stalled", threshold=20, channels=[{"type": "in_app"}])
    assert member.get(f"/api/alerts/rules/{default.id}").status_code == 200
    assert member.patch(f"/api/alerts/rules/{default.id}", {"enabled": False}, content_type="application/json").status_code == 403
    staff = client_for(quiet.staff)
    assert staff.patch(f"/api/alerts/rules/{default.id}", {"enabled": False}, content_type="application/json").status_code == 200
    assert member.delete(f"/api/alerts/rules/{rid}").status_code == 204


def test_test_delivery_sends_now_and_answers_what_the_receiver_said(quiet):
    admin = client_for(quiet.users["admin"])
    with Receiver(codes=[200, 404]) as receiver:
        created = admin.post("/api/alerts/rules", {
            "team": "acme", "name": "t", "condition": "stalled", "threshold": 30,
            "channels": [{"type": "webhook", "url": receiver.url, "secret": SECRET}, {"type": "slack", "url": receiver.url},
                         {"type": "in_app"}]}, content_type="application/json").json()
        answer = admin.post(f"/api/alerts/rules/{created['id']}/test").json()
        assert [(d["channel"], d["status"], d["last_code"]) for d in answer] == [("webhook", "sent", 200), ("slack", "failed", 404)]
        assert receiver.requests[0]["json"]["type"] == "alert.test"
    assert Notification.objects.filter(user=quiet.users["admin"]).count() == 1
    Delivery.objects.filter(firing__isnull=True).update(created_at=timezone.now() - timedelta(seconds=services.TEST_EVERY_S + 1))
    page = admin.get(f"/alerts/rules/{created['id']}/")
    assert page.status_code == 200 and b"HTTP 404" in page.content
    assert client_for(quiet.users["viewer"]).post(f"/api/alerts/rules/{created['id']}/test").status_code == 403


def test_pages_list_rules_and_firings(quiet, sent):
    run = running(quiet.team)
    rule(quiet.team, name="acme-watch", condition="above", threshold=0.5, window=1)
    step(run, 1, {KEY: 0.9})
    page = client_for(quiet.users["member"]).get("/alerts/")
    assert page.status_code == 200
    assert b"acme-watch" in page.content and f"/runs/{run.id}/?step=1".encode() in page.content and b"rule-create" in page.content
    assert b"rule-create" not in client_for(quiet.users["viewer"]).get("/alerts/").content
    assert b"acme-watch" not in client_for(quiet.other_users["admin"]).get("/alerts/").content


def test_default_rules_watch_every_run(world, sent):
    # What the data migration creates (a transactional test before this one flushed its rows).
    from django.apps import apps

    AlertRule.objects.filter(team__isnull=True).delete()
    import_module("controlplane.alerts.migrations.0002_default_rules").create(apps, None)
    names = set(AlertRule.objects.filter(team__isnull=True, enabled=True).values_list("name", flat=True))
    assert {"Reward collapse", "Infrastructure errors", "Run stalled"} <= names
    run = running(world.other)
    fired = [n for n, v in enumerate([0.9] * 10 + [0.0] * 10, start=1) if step(run, n, {"reward/x": v})]
    assert len(fired) == 1
    assert Notification.objects.filter(firing__run=run).count() == 4


def _defaults_as_migrated():
    """The default rules as migrations 0002 and 0003 leave them (a transactional test before may
    have flushed the rows the migrations made)."""
    from django.apps import apps

    AlertRule.objects.filter(team__isnull=True).delete()
    import_module("controlplane.alerts.migrations.0002_default_rules").create(apps, None)
    import_module("controlplane.alerts.migrations.0003_rl_health_rules").forward(apps, None)


HEALTHY = {"policy/kl": 0.01, "policy/entropy": 0.6, "mismatch/kl": 0.0, "health/is_weight_mean": 1.0,
           "health/ess": 0.99, "response/truncated_frac": 0.02}
"""One step of a healthy run (about what the demo's runs record)."""


@pytest.mark.parametrize("rule_name, key, bad", [
    ("KL spike", "policy/kl", 0.8),
    ("Entropy collapse", "policy/entropy", 0.01),
    ("Logprob mismatch", "mismatch/kl", 0.2),
    ("Importance weights high", "health/is_weight_mean", 3.0),
    ("Importance weights low", "health/is_weight_mean", 0.3),
    ("Effective sample size low", "health/ess", 0.1),
    ("Truncated completions", "response/truncated_frac", 0.3),
])
def test_rl_health_rules_are_on_by_default_fire_on_a_crossing_and_say_what_to_try(world, sent, rule_name, key, bad):
    _defaults_as_migrated()
    health = AlertRule.objects.get(team=None, name=rule_name)
    assert health.enabled and health.advice and "Try:" in health.advice
    run = running(world.team)
    for n in range(1, 11):  # healthy: nothing fires
        assert not step(run, n, HEALTHY)
    fired = []
    for n in range(11, 21):
        fired += step(run, n, HEALTHY | {key: bad})
    assert [f.rule.name for f in fired] == [rule_name], [f.message for f in fired]
    series = [HEALTHY[key]] * 10 + [bad] * 10  # the first step whose window's mean is beyond the bound
    beyond = (lambda m: m > health.threshold) if health.condition == "above" else (lambda m: m < health.threshold)
    expected = next(n for n in range(health.window, 21) if beyond(sum(series[n - health.window:n]) / health.window))
    assert fired[0].step == expected > 10 and health.advice in fired[0].message
    assert AlertFiring.objects.filter(run=run).count() == 1  # once, until it resolves


def test_a_team_rule_of_a_defaults_name_replaces_it_for_that_teams_runs_only(world, sent):
    _defaults_as_migrated()
    AlertRule.objects.create(team=world.team, name="Truncated completions", condition="above", metric="response/truncated_frac",
                             threshold=0.5, window=5, channels=[{"type": "in_app"}])
    AlertRule.objects.create(team=world.team, name="Entropy collapse", condition="below", metric="policy/entropy",
                             threshold=0.05, window=5, channels=[{"type": "in_app"}], enabled=False)
    ours, theirs = running(world.team, "ours"), running(world.other, "theirs")
    fired = {ours.id: [], theirs.id: []}
    for n in range(1, 11):
        for run in (ours, theirs):
            fired[run.id] += [f.rule.name for f in step(run, n, HEALTHY | {"response/truncated_frac": 0.3, "policy/entropy": 0.0})]
    assert sorted(fired[theirs.id]) == ["Entropy collapse", "Truncated completions"]
    assert fired[ours.id] == []  # its own bound (0.5) is not crossed, and it switched entropy off


def test_notification_ids_are_bounded_row_ids(quiet):
    viewer = client_for(quiet.users["viewer"])
    for ids in ([123456789012345678901234567890], [0], ["1"], list(range(1, 1002))):
        r = viewer.post("/api/notifications/read", {"ids": ids}, content_type="application/json")
        assert r.status_code == 422, ids



def test_a_token_sees_the_notifications_of_its_team_only_and_a_leaver_none_of_the_old_team(quiet, sent):
    from controlplane.accounts.models import Membership

    u = quiet.users["member"]
    Membership.objects.create(user=u, team=quiet.other, role="viewer")
    run = running(quiet.team)
    rule(quiet.team, condition="above", threshold=0.5, window=1)
    step(run, 1, {KEY: 0.9})
    _, secret = factories.token(u, quiet.other, "viewer")
    by_token = Client().get("/api/notifications", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    assert by_token == {"unread": 0, "items": []}
    assert Client().post("/api/notifications/read", {}, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {secret}").json()["marked"] == 0
    session = client_for(u)
    assert session.get("/api/notifications").json()["unread"] == 1
    Membership.objects.filter(user=u, team=quiet.team).delete()
    assert session.get("/api/notifications").json()["unread"] == 0
    assert b'data-testid="unread-count"' not in session.get("/").content


def test_urls_and_addresses_are_shown_only_to_those_who_edit_the_rule(quiet):
    type(quiet.users["viewer"]).objects.filter(pk=quiet.users["viewer"].pk).update(email="vera@acme.test")
    body = {"team": "acme", "name": "hooks", "condition": "stalled", "threshold": 30, "channels": [
        {"type": "slack", "url": "https://hooks.slack.com/services/T0/B0/SLACKTOKEN"},
        {"type": "webhook", "url": "https://hooks.example.com/t?token=BEARERTOKEN", "secret": SECRET},
        {"type": "email", "to": ["vera@acme.test"]}]}
    rid = client_for(quiet.users["admin"]).post("/api/alerts/rules", body, content_type="application/json").json()["id"]
    assert "SLACKTOKEN" in client_for(quiet.users["member"]).get(f"/api/alerts/rules/{rid}").content.decode()
    viewer = client_for(quiet.users["viewer"])
    for text in (viewer.get(f"/api/alerts/rules/{rid}").content.decode(), viewer.get("/api/alerts/rules").content.decode(),
                 viewer.get("/alerts/").content.decode(), viewer.get(f"/alerts/rules/{rid}/").content.decode()):
        assert "SLACKTOKEN" not in text and "BEARERTOKEN" not in text and "vera@acme.test" not in text
    channels = viewer.get(f"/api/alerts/rules/{rid}").json()["channels"]
    assert channels[0]["url"] == "https://hooks.slack.com/…" and channels[2] == {"type": "email", "recipients": 1}
    default = AlertRule.objects.create(team=None, name="d", condition="stalled", threshold=20,
                                       channels=[{"type": "slack", "url": "https://hooks.slack.com/services/T0/B0/DEFAULTTOKEN"}])
    assert "DEFAULTTOKEN" not in client_for(quiet.other_users["admin"]).get(f"/api/alerts/rules/{default.id}").content.decode()
    assert "DEFAULTTOKEN" in client_for(quiet.staff).get(f"/api/alerts/rules/{default.id}").content.decode()


def test_hosts_are_plain_names_and_checked_addresses_are_the_ones_connected_to(quiet, settings, monkeypatch):
    import socket

    from controlplane.alerts import transport

    settings.TEMPER_ALERT_ALLOW_PRIVATE = False
    admin = client_for(quiet.users["admin"])
    for url in ("http://127%2E0%2E0%2E1.attacker.test/h", "http://a_b.test/h", "http://[64:ff9b::a9fe:a9fe]/h",
                "http://[2002:7f00:1::]/h", "http://[fec0::1]/h", "http://[::127.0.0.1]/h"):
        r = admin.post("/api/alerts/rules", {"team": "acme", "name": "x", "condition": "stalled", "threshold": 30,
                                             "channels": [{"type": "slack", "url": url}]}, content_type="application/json")
        assert r.status_code == 422, url
    assert [transport.public_ip(a) for a in ("93.184.216.34", "64:ff9b::a00:1", "2002:7f00:1::", "::ffff:0:7f00:1", "fe80::1")] == \
        [True, False, False, False, False]
    with Receiver() as receiver:
        port = int(receiver.url.split(":")[2].split("/")[0])
        real = socket.getaddrinfo
        answers = iter(["93.184.216.34", "127.0.0.1"])  # what a rebinding name answers: checked, then not

        def rebinding(host, *args, **kw):
            if host == "rebind.attacker.test":
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
            return real(host, *args, **kw)

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        from controlplane.alerts.channels import http

        monkeypatch.setattr(http, "TIMEOUT_S", 1.0)  # the deadline of a channel's POST
        run = running(quiet.team)
        r = rule(quiet.team, channels=[{"type": "slack", "url": f"http://rebind.attacker.test:{port}/hook"}])
        d = Delivery.objects.create(rule=r, firing=AlertFiring.objects.create(rule=r, run=run, key=KEY, step=1, message="m"),
                                    channel="slack", target=f"http://rebind.attacker.test:{port}/hook", payload={"slot": 0, "message": "m"})
        d = services.deliver(d.id)
        assert receiver.requests == [] and d.status == "pending"  # it went to the address checked, not to loopback


def test_a_receiver_that_trickles_is_cut_off_at_the_deadline(quiet, monkeypatch):
    import socket
    import threading
    import time as time_

    from controlplane.alerts.channels import http

    monkeypatch.setattr(http, "TIMEOUT_S", 0.5)  # the deadline of a channel's POST
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def trickle():
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.is_set():  # a header byte now and then, each well inside a socket timeout
            try:
                conn.sendall(b"X")
            except OSError:
                break
            time_.sleep(0.1)
        conn.close()

    threading.Thread(target=trickle, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    try:
        run = running(quiet.team)
        r = rule(quiet.team, channels=[{"type": "slack", "url": url}])
        d = Delivery.objects.create(rule=r, firing=AlertFiring.objects.create(rule=r, run=run, key=KEY, step=1, message="m"),
                                    channel="slack", target=url, payload={"slot": 0, "message": "m"})
        d = services.deliver(d.id)
    finally:
        stop.set()
        server.close()
    assert d.status == "pending" and "no answer within 0.5 s" in d.last_error


def test_a_second_channel_to_the_same_place_is_refused(quiet):
    r = client_for(quiet.users["admin"]).post("/api/alerts/rules", {
        "team": "acme", "name": "x", "condition": "stalled", "threshold": 30,
        "channels": [{"type": "in_app"}, {"type": "in_app"}, {"type": "slack", "url": "https://h.example.com/a"},
                     {"type": "slack", "url": "https://h.example.com/a"}]}, content_type="application/json")
    assert r.status_code == 422 and {e["path"] for e in r.json()["errors"]} == {"channels[1]", "channels[3]"}


def test_a_rule_watches_a_bounded_number_of_keys(quiet, sent, monkeypatch):
    monkeypatch.setattr(services, "MAX_KEYS_PER_RULE", 3)
    run = running(quiet.team)
    rule(quiet.team, metric="*", condition="above", threshold=0.5, window=1)
    assert len(step(run, 1, {f"k/{i:02d}": 0.9 for i in range(10)})) == 3


def test_an_address_that_left_the_team_is_not_mailed(quiet, sent, settings, django_capture_on_commit_callbacks):
    from controlplane.accounts.models import Membership

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    for role, email in (("viewer", "vera@acme.test"), ("member", "mo@acme.test")):
        type(quiet.users[role]).objects.filter(pk=quiet.users[role].pk).update(email=email)
    run = running(quiet.team)
    rule(quiet.team, condition="above", threshold=0.5, window=1, channels=[{"type": "email", "to": ["vera@acme.test", "mo@acme.test"]}])
    Membership.objects.filter(user=quiet.users["viewer"], team=quiet.team).delete()
    with django_capture_on_commit_callbacks(execute=True):
        step(run, 1, {KEY: 0.9})
    deliver_sent(sent)
    (message,) = mail.outbox
    assert message.to == ["mo@acme.test"]


def test_a_viewer_sees_that_a_delivery_failed_not_what_the_receiver_or_resolver_said(quiet):
    admin = client_for(quiet.users["admin"])
    created = admin.post("/api/alerts/rules", {"team": "acme", "name": "t", "condition": "stalled", "threshold": 30,
                                               "channels": [{"type": "slack", "url": "http://127.0.0.1:9/x"}]},
                         content_type="application/json").json()
    (answer,) = admin.post(f"/api/alerts/rules/{created['id']}/test").json()
    assert answer["status"] == "failed" and answer["last_error"] not in ("", "failed")
    (shown,) = client_for(quiet.users["viewer"]).get(f"/api/alerts/rules/{created['id']}/deliveries").json()["items"]
    assert shown["last_error"] == "failed" and all("error" not in e for e in shown["log"])
