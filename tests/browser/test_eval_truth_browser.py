"""One evaluation truth, in Chromium: a checkpoint's held-out numbers are the same on the run
page's eval chart, on the registry's comparison page and in the registry's API."""
from __future__ import annotations

import pytest
from django.test import Client

from controlplane.registry import services
from controlplane.registry.models import ModelVersion
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user
from tests.controlplane.test_eval_truth import checkpoint_version, record

pytestmark = [pytest.mark.browser, pytest.mark.services]
N = 24


def test_a_checkpoints_eval_numbers_agree_on_run_page_compare_page_and_api(server, browser):
    team = factories.team("acme")
    admin = browser_user(team, "admin", "ada")
    addition, parity = factories.domain("addition"), factories.domain("parity", kind="reasoning")
    suite = services.suite_save(actor=factories.actor(admin), data={"slug": "heldout", "team": "acme", "auto_evaluate": True, "items": [
        {"domain": "addition", "tasks": N}, {"domain": "parity", "tasks": N}]})
    run = factories.run(team, domains=[addition, parity], base_model="/models/tiny", state="completed",
                        budget_steps=10, current_step=10)
    base = ModelVersion.objects.create(team=team, kind="base", name="tiny", base="tiny", base_model="/models/tiny",
                                       path="/models/tiny")
    record(base, suite, {"addition": [0.0] * N, "parity": [1.0, 0.0] * (N // 2)})
    v5, v10 = checkpoint_version(run, 5), checkpoint_version(run, 10)
    record(v5, suite, {"addition": [1.0, 0.0, 0.0] * (N // 3), "parity": [1.0, 0.0] * (N // 2)})
    record(v10, suite, {"addition": [1.0, 1.0, 0.0] * (N // 3), "parity": [1.0, 1.0, 1.0, 0.0] * (N // 4)})

    page = server.page(browser, "eval-truth")
    server.login(page, "ada", PASSWORD)
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => Number(document.getElementById('chart-eval').dataset.points || 0) > 0")
    assert "heldout" in page.inner_text("[data-testid=eval-source]")
    drawn = page.evaluate("""() => Object.fromEntries(document.getElementById('chart-eval').data
        .filter((t) => t.mode === 'lines+markers').map((t) => [t.name, Object.fromEntries(t.customdata.map((s, i) => [s, t.y[i]]))]))""")
    assert set(drawn) == {"addition", "parity"}  # every domain of the suite

    page.goto(f"/registry/compare/?v={base.id}&v={v10.id}")
    page.wait_for_selector("[data-testid=compare-table]")
    api = Client()
    api.force_login(admin)
    eval_id = api.get(f"/api/registry/evals?version={v10.id}").json()["items"][0]["id"]
    stored = {r["domain"]: r["mean_reward"] for r in api.get(f"/api/registry/evals/{eval_id}").json()["results"]}
    for domain in ("addition", "parity"):
        cell = page.locator(f"[data-testid=compare-row][data-domain='{domain}'] [data-testid=compare-cell][data-version-id='{v10.id}']")
        shown = float(cell.get_attribute("data-mean"))
        assert shown == pytest.approx(drawn[domain]["10"]) == pytest.approx(stored[domain]), domain
        base_cell = page.locator(f"[data-testid=compare-row][data-domain='{domain}'] [data-testid=compare-cell][data-version-id='{base.id}']")
        assert float(base_cell.get_attribute("data-mean")) == pytest.approx(drawn[domain]["0"])
    assert drawn["addition"]["5"] == pytest.approx(1 / 3) and drawn["parity"]["10"] == pytest.approx(0.75)
