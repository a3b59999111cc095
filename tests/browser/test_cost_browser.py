"""Cost in money in the browser: a platform admin prices a pool on /manage/; a member gives a run
a money budget on the run form (a bad one is refused beside its field, nothing saved); the run
page's usage card shows the run's cost at those prices and the budget."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.core.management import call_command

from controlplane.runs.models import Run
from controlplane.runs.services import run_record_step
from controlplane.scheduling.models import ResourcePool
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.usefixtures("money_context")]


def test_a_price_on_a_pool_and_a_money_budget_on_the_run_form_reach_the_run_page(server, browser):
    from trainer.models.tiny import build_tiny

    model = build_tiny(server.var_dir / "models" / "tiny-cost", layers=1)
    call_command("domains", "sync", "--no-progress", "--only", "builtin-addition", verbosity=0)
    factories.audits_passed()
    team = factories.team("acme")
    browser_user(team, "member", "alice")
    factories.user("root", staff=True, password=PASSWORD)

    admin = server.logged_in_page(browser, "admin", "root")
    admin.goto("/manage/#pools")
    admin.fill("[data-testid=pool-name]", "cpu")
    admin.select_option("[data-testid=pool-kind]", "cpu")
    admin.fill("[data-testid=pool-capacity]", "2")
    admin.fill("[data-testid=pool-price]", "3.60")
    admin.click("[data-testid=pool-save]")
    admin.wait_for_selector("tr[data-pool=cpu] [data-field=price]")
    assert admin.inner_text("tr[data-pool=cpu] [data-field=price]") == "3.6 a CPU-hour"
    assert ResourcePool.objects.get(name="cpu").price == Decimal("3.6")

    page = server.logged_in_page(browser, "member", "alice")
    page.goto("/runs/new/")
    page.fill("[data-testid=run-name]", "priced run")
    assert page.input_value("[data-testid=base-model]") == str(model)
    page.fill("[data-testid=domain-search]", "builtin-")
    page.check("[data-testid=pick-builtin-addition]")
    page.fill("[data-testid=budget-steps]", "5")
    page.fill("[data-testid=budget-cost]", "0")
    page.click("[data-testid=validate]")
    page.wait_for_selector("[data-path-error='budget.cost']:has-text('must be above 0')")
    screenshot(page, "cost-01-budget-refused")
    assert not Run.objects.exists()
    page.fill("[data-testid=budget-cost]", "12.50")
    page.click("[data-testid=create]")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(name="priced run")
    assert run.budget_cost == Decimal("12.50")

    # One step's usage as the driver records it: 100 CPU seconds at 3.60 a CPU-hour cost 0.10.
    run_record_step(run=run, worker="", step=1, metrics={}, samples=[], verifier_versions={},
                    usage={"": {"wall_s": 1.0, "cpu_s": 100.0, "gpu_s": 0.0}})
    page.reload()
    page.wait_for_selector("[data-testid=usage-cost]")
    assert page.inner_text("[data-testid=usage-cost] [data-field=cost_total]") == "0.10"
    assert page.inner_text("[data-testid=usage-cost] [data-field=budget_cost]") == "12.50"
    assert page.inner_text("[data-testid=usage-cost] [data-field=budget_left]") == "12.40"
    assert page.inner_text("[data-testid=budget-cost]") == "budget: cost 12.5 USD"
    screenshot(page, "cost-02-run-page")
