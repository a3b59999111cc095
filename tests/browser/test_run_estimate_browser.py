"""The new-run form's estimate, in the browser against the real server: it appears once domains
are picked, names each domain's source (run history for one, an assumption for the other),
follows the step budget as it is typed, and shows the server's refusal of a bad body."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from controlplane.runs.models import Run, UsageRecord
from controlplane.scheduling.models import ResourcePool
from tests import factories
from tests.browser.conftest import browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]

DOMAINS = ["builtin-addition", "builtin-parity"]


def _value(page, figure: str) -> float:
    return float(page.get_attribute(f"[data-testid=estimate-{figure}]", "data-value"))


def test_the_estimate_follows_the_form_and_names_its_sources(server, browser):
    call_command("domains", "sync", "--no-progress", "--only", *DOMAINS, verbosity=0)
    factories.audits_passed()
    team = factories.team("acme")
    browser_user(team, "member", "alice")
    earlier = factories.run(team, base_model="tiny-llama", state="completed")
    for step in (1, 2):  # an earlier run's usage: 16 completions of 20 tokens in 8 s of wall
        UsageRecord.objects.create(run=earlier, team=team, step=step, domain="", at=timezone.now(), wall_s=4.0, cpu_s=4.0)
        UsageRecord.objects.create(run=earlier, team=team, step=step, domain="builtin-addition", at=timezone.now(),
                                   generated_tokens=160, trained_tokens=160, completions=8)

    ResourcePool.objects.filter(kind="cpu").delete()
    ResourcePool.objects.create(name="cpus", kind="cpu", capacity=4, price=Decimal("3.6"))  # 0.001 a CPU-second

    page = server.logged_in_page(browser, "estimate", "alice")
    page.goto("/runs/new/")
    assert "Pick domains" in page.inner_text("[data-testid=estimate-state]")
    page.fill("[data-testid=base-model]", "tiny-llama")
    page.fill("[data-testid=domain-search]", "builtin-")
    for slug in DOMAINS:
        page.check(f"[data-testid=pick-{slug}]")
    page.fill("[data-testid=budget-steps]", "10")
    page.fill("[data-testid=cfg-rollout-prompts_per_step]", "4")
    page.fill("[data-testid=cfg-rollout-n]", "2")
    page.wait_for_function("() => document.querySelector('[data-testid=estimate-state]').dataset.state === 'ok'"
                           " && document.querySelector('[data-testid=estimate-state]').textContent.startsWith('10 steps')"
                           " && document.querySelector('[data-testid=estimate-state]').textContent.includes('4 tasks × 2')")
    assert _value(page, "completions") == 80  # 10 steps x 4 tasks x 2 completions
    # builtin-addition: 20 tokens and 0.5 s a completion (its history); builtin-parity: 64 tokens
    # (the allowance) at addition's 0.025 s a token; 4 completions each a step.
    assert _value(page, "generated_tokens") == 10 * (4 * 20 + 4 * 64)
    assert _value(page, "wall_s") == pytest.approx(10 * (4 * 0.5 + 4 * 64 * 0.025))
    assert page.text_content("[data-testid=estimate-source-builtin-addition]").startswith("history")
    assert page.text_content("[data-testid=estimate-source-builtin-parity]").startswith("assumed")
    wall = _value(page, "wall_s")
    cost = float(page.get_attribute("[data-testid=estimate-cost]", "data-total"))
    assert cost == pytest.approx(_value(page, "cpu_s") * 0.001, abs=1e-6) and cost > 0
    assert "USD" in page.inner_text("[data-testid=estimate-cost]")
    screenshot(page, "estimate-10-steps")

    page.fill("[data-testid=budget-steps]", "20")
    page.wait_for_function("() => document.querySelector('[data-testid=estimate-completions]')?.dataset.value === '160'")
    assert _value(page, "wall_s") == pytest.approx(2 * wall, rel=1e-3)
    assert float(page.get_attribute("[data-testid=estimate-cost]", "data-total")) == pytest.approx(2 * cost, rel=1e-3)
    screenshot(page, "estimate-20-steps")

    page.fill("[data-testid=cfg-rollout-n]", "0")  # refused by the server, naming the field
    page.wait_for_function("() => document.querySelector('[data-testid=estimate-state]').dataset.state === 'invalid'")
    assert "config.rollout.n" in page.inner_text("[data-testid=estimate-state]")
    assert not Run.objects.exclude(pk=earlier.pk).exists()
