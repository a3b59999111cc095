"""The run page's first reward chart is drawn by the server (controlplane/web/sketch.py): it shows
with its points while plotly.js has not loaded, under the CSP, and plotly's chart replaces it in
place once plotly.js is there."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.browser.conftest import PASSWORD, browser_user, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]

WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective));
"""


def _run(team):
    domains = [factories.domain("sketch-a"), factories.domain("sketch-b")]
    run = factories.run(team, domains=domains, state="running", budget_steps=100, current_step=59)
    t0 = timezone.now() - timedelta(minutes=5)
    points = [MetricPoint(run=run, step=s, domain=d.slug, key=f"reward/{d.slug}", value=(s + 10 * i) / 80,
                          time=t0 + timedelta(seconds=s)) for i, d in enumerate(domains) for s in range(60)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)
    return run


def _page(server, browser, name):
    """A signed-in page without the service worker (so routes see every request)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=server.url, service_workers="block")
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.add_init_script(WATCH)
    server.login(page, "vera", PASSWORD)
    return page


def test_reward_chart_shows_before_plotly_and_plotly_replaces_it(server, browser):
    team = factories.team("acme")
    browser_user(team, "viewer", "vera")
    run = _run(team)

    page = _page(server, browser, "sketch")
    page.route("**/plotly*.js", lambda route: route.abort())  # plotly.js never arrives
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => window.TemperLive && window.TemperLive.firstDrawMs !== undefined")
    sketch = page.locator("#chart-reward [data-testid=reward-sketch]")
    assert sketch.get_attribute("data-points") == "120"
    assert sketch.locator("path.smooth").count() == 2
    assert sketch.locator(".sketch-legend").inner_text().split() == ["sketch-a", "sketch-b"]
    box = sketch.locator("svg").bounding_box()
    assert box["width"] > 400 and box["height"] > 150  # stretched over the plot area
    assert page.evaluate("window.TemperLive.plotlyDrawMs") is None
    screenshot(page, "24-reward-chart-before-plotly")
    assert page.evaluate("window.__csp") == []

    page = _page(server, browser, "sketch-replaced")
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => window.TemperLive && window.TemperLive.plotlyDrawMs !== undefined")
    live = page.evaluate("window.TemperLive")
    assert live["firstDrawMs"] <= live["plotlyDrawMs"]
    assert page.locator("#chart-reward [data-testid=reward-sketch]").count() == 0  # replaced, not beside it
    assert page.get_attribute("#chart-reward", "data-points") == "120"
    assert page.locator("#chart-reward .scatterlayer .trace").count() >= 2
    assert page.evaluate("window.__csp") == []
