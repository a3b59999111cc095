"""The run page charts each domain's sandbox pool (workers/sandbox/elastic.py): its size and
creations per second on the left axis, the waits for a sandbox (p50, p99) on the right."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_the_run_page_charts_each_domains_sandbox_pool(server, browser, world):
    t0 = timezone.now() - timedelta(minutes=5)
    run = factories.run(world.team, domains=[world.domain], state="completed", budget_steps=10, current_step=9, started_at=t0)
    d = world.domain.slug
    values = {"pool_size": lambda s: 2.0 + (s % 4), "creations_per_s": lambda s: 0.05 * s,
              "wait_p50_s": lambda s: 0.001, "wait_p99_s": lambda s: 0.2 if s == 3 else 0.01}
    points = [MetricPoint(run=run, step=s, domain=d, key=f"sandbox/{d}/{name}", value=f(s), time=t0 + timedelta(seconds=5 * s))
              for name, f in values.items() for s in range(10)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)
    page = server.page(browser, "sandbox-chart")
    server.login(page, "acme-admin", "pw-123456")
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => Number(document.getElementById('chart-sandbox').dataset.points || 0) > 0")
    traces = page.evaluate("() => document.getElementById('chart-sandbox').data.filter((t) => t.showlegend !== false)"
                           ".map((t) => [t.name, t.yaxis || 'y', Math.max(...t.y)])")
    axes = {name: axis for name, axis, _ in traces}
    assert axes == {f"{d}/pool_size": "y", f"{d}/creations_per_s": "y", f"{d}/wait_p50_s": "y2", f"{d}/wait_p99_s": "y2"}
    top = {name: top for name, _, top in traces}  # (smoothed, as every chart's lines are)
    assert top[f"{d}/wait_p99_s"] > top[f"{d}/wait_p50_s"] and top[f"{d}/pool_size"] > 2
    screenshot(page, "44-run-sandbox-pools")
