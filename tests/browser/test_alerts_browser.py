"""Alert rules in the browser: a member creates a webhook rule with the form (all errors shown at
once first), sends a test delivery to a real local receiver and reads its answer; a firing shows
in the header's unread count and its notification links to the run's chart at that step."""
from __future__ import annotations

import pytest

from controlplane.alerts import services as alerts
from controlplane.alerts.models import AlertRule
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.alerts_receiver import Receiver
from tests.browser.conftest import PASSWORD, browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_member_creates_a_rule_tests_it_and_follows_a_firing_to_the_chart(server, browser):
    team = factories.team("acme")
    browser_user(team, "member", "mia")
    run = factories.run(team, name="nightly", state="running", driver="w1", budget_steps=50)
    page = server.page(browser, "alerts")
    server.login(page, "mia", PASSWORD)
    with Receiver() as receiver:
        page.goto("/alerts/")
        form = "[data-testid=rule-create] form"
        page.fill(f"{form} input[name=name]", "addition collapse")
        page.select_option(f"{form} select[name=condition]", "drop")
        page.fill(f"{form} input[name=threshold]", "0")
        page.fill(f"{form} input[name=webhook_url]", receiver.url)
        page.click(f"{form} [data-testid=rule-save]")
        errors = page.locator("[data-testid=rule-create] [data-testid=rule-errors]")
        errors.wait_for()
        page.wait_for_function("() => document.querySelector('[data-testid=rule-create] [data-testid=rule-errors]').textContent.length > 0")
        text = errors.inner_text()
        assert "metric" in text and "threshold" in text and "secret" in text  # every error of the form at once
        page.fill(f"{form} input[name=metric]", "reward/*")
        page.fill(f"{form} input[name=threshold]", "0.3")
        page.fill(f"{form} input[name=window]", "2")
        page.fill(f"{form} input[name=webhook_secret]", "browser-secret-0001")
        page.click(f"{form} [data-testid=rule-save]")
        page.wait_for_url("**/alerts/rules/*/")
        rule = AlertRule.objects.get(team=team)
        assert rule.metric == "reward/*" and rule.channels[0] == {"type": "in_app"}
        page.click("[data-testid=rule-test]")
        page.wait_for_function("() => document.querySelector('[data-testid=test-result]').textContent.includes('sent')")
        assert "HTTP 200" in page.inner_text("[data-testid=test-result]")
        assert receiver.requests[-1]["json"]["type"] == "alert.test"
        screenshot(page, "alerts-rule")
    for n, v in enumerate([0.9, 0.9, 0.9, 0.0, 0.0], start=1):
        MetricPoint.objects.create(run=run, step=n, key="reward/builtin-addition", value=v)
        alerts.alerts_after_step(run=run, step=n)
    page.goto("/")
    assert page.inner_text("[data-testid=unread-count]") == "2"  # the test's and the firing's
    page.click("[data-testid=notifications-link]")
    page.click("[data-testid=notifications] a >> text=nightly")
    page.wait_for_url(lambda url: f"/runs/{run.id}/?step=4&metric=reward/builtin-addition" in url)
    page.wait_for_selector("#charts")


def test_a_team_adjusts_a_default_health_rule_for_its_own_runs(server, browser):
    from importlib import import_module

    from django.apps import apps

    AlertRule.objects.filter(team__isnull=True).delete()  # the defaults as the migrations leave them
    import_module("controlplane.alerts.migrations.0002_default_rules").create(apps, None)
    import_module("controlplane.alerts.migrations.0003_rl_health_rules").forward(apps, None)
    default = AlertRule.objects.get(team=None, name="Truncated completions")
    team = factories.team("acme")
    browser_user(team, "admin", "ada")
    page = server.page(browser, "alerts-adjust")
    server.login(page, "ada", PASSWORD)
    page.goto("/alerts/")
    page.click(f"[data-testid=rule-copy-{default.id}]")
    form = "[data-testid=rule-create] form"
    assert page.input_value(f"{form} input[name=name]") == "Truncated completions"
    assert page.input_value(f"{form} textarea[name=advice]") == default.advice
    page.fill(f"{form} input[name=threshold]", "0.2")
    page.click(f"{form} [data-testid=rule-save]")
    page.wait_for_url("**/alerts/rules/*/")
    own = AlertRule.objects.get(team=team, name="Truncated completions")
    assert (own.threshold, own.metric, own.window, own.advice) == (0.2, default.metric, default.window, default.advice)
    page.goto("/alerts/")
    assert "replaced for acme" in page.inner_text(f"[data-testid=rule-replaced-{default.id}]")
    run = factories.run(team, state="running", budget_steps=50)
    assert [r.id for r in alerts.rules_for(run) if r.name == "Truncated completions"] == [own.id]
