"""Zooming re-buckets on the server; an admin edits a domain's quota in the page; the runs list
updates live. No workers needed: the test writes through the driver's own write path."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs import services as run_services
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]

def test_zoom_asks_the_server_for_finer_buckets(server, browser):
    team = factories.team("acme")
    browser_user(team, "viewer", "vera")
    d = factories.domain("zoomed")
    run = factories.run(team, domains=[d], state="completed", budget_steps=20_000, current_step=19_999)
    t0 = timezone.now() - timedelta(hours=3)
    points = [MetricPoint(run=run, step=s, domain="zoomed", key="reward/zoomed", value=(s % 97) / 97,
                          time=t0 + timedelta(seconds=s / 2)) for s in range(20_000)]
    MetricPoint.objects.bulk_create(points, batch_size=5000)
    series.rollup(points)
    page = server.logged_in_page(browser, "zoom", "vera")
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => window.TemperLive && window.TemperLive.plotlyDrawMs !== undefined")
    assert int(page.get_attribute("#chart-reward", "data-points")) == len(range(0, 20_000, 256))  # buckets, not 20,000 points
    # Drag across a narrow part of the chart with the mouse: the page asks for that range again.
    box = page.locator("#chart-reward .nsewdrag").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.50, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.52, y, steps=5)
    page.mouse.up()
    page.wait_for_function("() => ['1', '16'].includes(document.getElementById('chart-reward').dataset.zoomWidth)")
    screenshot(page, "07-zoomed")
    page.select_option("[data-testid=x-axis]", "time")
    page.wait_for_function("() => document.querySelector('#chart-reward .xtick text').textContent.includes(':')")


def test_admin_edits_domain_quota_and_runs_list_is_live(server, browser):
    team = factories.team("acme")
    browser_user(team, "admin", "ada")
    dom = factories.domain("team-dom", team_=team)
    run = factories.run(team, name="live-row", domains=[dom], state="running", driver="w1", budget_steps=50)
    page = server.logged_in_page(browser, "admin", "ada")

    page.goto(f"/domains/{dom.slug}/")
    page.fill("#quota-form input[name=priority]", "150")
    page.click("[data-testid=save-quota]")
    page.wait_for_selector("[data-path-error=priority]:not(:empty)")
    assert "99" in page.inner_text("[data-path-error=priority]")  # the server's message, beside the field
    page.fill("#quota-form input[name=priority]", "70")
    page.fill("#quota-form input[name=note]", "more important now")
    page.click("[data-testid=save-quota]")
    page.wait_for_selector("text=v2")
    dom.refresh_from_db()
    assert dom.priority == 70 and dom.version == 2
    page.wait_for_selector("[data-testid=diff] code:text('priority')")
    screenshot(page, "08-domain-edited")

    page.goto("/")
    page.wait_for_selector("[data-testid=live-state][data-state=live]")
    row = f"tr[data-run='{run.id}']"
    assert page.inner_text(f"{row} [data-field=step]") == "0"
    writer = threading.Thread(target=lambda: run_services.run_record_step(
        run=run, worker="w1", step=12, metrics={"reward/mean": 0.75}, samples=[], verifier_versions={}))
    writer.start()
    writer.join()
    page.wait_for_selector(f"{row} [data-field=step]:text('12')")
    assert page.inner_text(f"{row} [data-field=reward]") == "0.75"


def test_first_run_page_gets_plotly_from_the_service_worker(server, browser):
    """The sign-in page registers /sw.js, which caches plotly.js while it installs; the first run
    page the user opens is then served plotly.js by the worker (compiled by the browser with it)."""
    team = factories.team("acme")
    browser_user(team, "viewer", "vera")
    d = factories.domain("sw-dom")
    run = factories.run(team, domains=[d], state="completed", budget_steps=10, current_step=3)
    points = [MetricPoint(run=run, step=s, domain="sw-dom", key="reward/sw-dom", value=s / 3, time=timezone.now())
              for s in (1, 2, 3)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)
    page = server.page(browser, "service-worker")
    page.goto("/login/")
    page.wait_for_function("() => navigator.serviceWorker.ready.then((r) => !!r.active)")
    server.login(page, "vera", PASSWORD)
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => window.TemperLive && window.TemperLive.plotlyDrawMs !== undefined")
    plotly = json.dumps(f"/static/{settings.TEMPER_PLOTLY_JS}")  # the basic bundle where fetched (make install)
    served = page.evaluate(f"performance.getEntriesByType('resource').filter((e) => e.name.endsWith({plotly}))"
                           ".map((e) => e.workerStart > 0)")
    assert served == [True]
    assert page.evaluate("caches.keys()") and all(k.startswith("temper-") for k in page.evaluate("caches.keys()"))
