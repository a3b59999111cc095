"""Every page works under the Content-Security-Policy: Chromium loads each main page and reports
no violation, an injected inline script is refused, the controls moved out of inline handlers
still work, and the live client says why the server refused its socket."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.accounts.models import Membership
from controlplane.registry import services as registry_services
from controlplane.runs import series
from controlplane.runs.models import MetricPoint
from tests import factories
from tests.browser.conftest import screenshot
from tests.controlplane.test_registry_gate import N, evaluated, version

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));
"""
"""Installed before any script of each page: every violation the page meets, in order."""

REFUSAL = """(path) => new Promise((resolve) => Temper.liveSocket(path, {
  onMessage() {}, onState(state, detail) { if (state === "refused") resolve(detail); } }))"""
"""Opens a live socket the page's way and resolves with the words it shows when refused."""


def _world_to_look_at(world):
    """A run with a reward curve, two checkpoints evaluated on a suite (the comparison page), and
    the admin of acme a viewer of globex too (the team switch)."""
    admin = factories.actor(world.users["admin"])
    run = factories.run(world.team, domains=[world.domain], state="completed", budget_steps=50, current_step=49)
    t0 = timezone.now() - timedelta(minutes=5)
    points = [MetricPoint(run=run, step=s, domain=world.domain.slug, key=f"reward/{world.domain.slug}",
                          value=s / 50, time=t0 + timedelta(seconds=s)) for s in range(50)]
    MetricPoint.objects.bulk_create(points)
    series.rollup(points)
    sv = registry_services.suite_save(actor=admin, data={"slug": "core", "team": "acme", "items": [
        {"domain": "addition", "tasks": N}, {"domain": "parity", "tasks": N}]})
    first, last = version(world.team, f"tiny@{run.id}/1"), version(world.team, f"tiny@{run.id}/5")
    first.run = last.run = run
    first.step, last.step = 1, 5
    first.save()
    last.save()
    evaluated(first, sv, {"addition": [1.0, 0.0] * (N // 2), "parity": [1.0] * N})
    evaluated(last, sv, {"addition": [1.0] * N, "parity": [1.0, 0.0] * (N // 2)})
    Membership.objects.create(user=world.users["admin"], team=world.other, role="viewer")
    return run


def test_every_page_runs_under_the_csp_without_a_violation(server, browser, world):
    run = _world_to_look_at(world)
    foreign_run = factories.run(factories.team("initech"))  # a team the admin of acme is no member of
    page = server.page(browser, "csp")
    page.add_init_script(WATCH)
    console, errors = [], []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    server.login(page, "acme-admin", "pw-123456")
    pages = {
        "/": "[data-testid=live-state][data-state=live]",
        "/runs/new/": "#form-data",
        f"/runs/{run.id}/": "[data-testid=live-state][data-state=live]",
        "/domains/": "main",
        f"/domains/{world.domain.slug}/": "main",
        "/queue/": "#queue-body",
        "/registry/": "[data-testid=registry-versions]",
        f"/registry/compare/?run={run.id}": "[data-testid=compare-table]",
        f"/runs/compare/?run={run.id}&run={factories.run(world.team).id}": "#cmp-reward-mean[data-runs]",
        "/review/": "[data-testid=review-judges]",
        "/api/docs": ".swagger-ui .info",
        "/admin/": "#content",
    }
    for url, ready in pages.items():
        response = page.goto(url)
        assert response.status == 200, url
        assert "script-src 'self' 'nonce-" in response.headers["content-security-policy"], url
        page.wait_for_selector(ready, state="attached")
        if url == f"/runs/{run.id}/":
            page.wait_for_function("() => window.TemperLive && window.TemperLive.plotlyDrawMs !== undefined")
            assert int(page.get_attribute("#chart-reward", "data-points")) > 0  # plotly drew under the policy
        page.wait_for_load_state("load")
        assert page.evaluate("window.__csp") == [], url
    screenshot(page, "11-csp-admin")
    assert [c for c in console if "Content Security Policy" in c] == []
    assert errors == []

    # The policy is enforced: a script injected into the page does not run, and says so.
    page.goto("/")
    page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
                  " document.body.append(s); }")
    assert page.evaluate("window.__ran") is None
    assert [v.split(" ")[0] for v in page.evaluate("window.__csp")] == ["script-src-elem"]

    # <select data-autosubmit> (an onchange= before): the team switch and the comparison's suite.
    page.goto("/")
    with page.expect_navigation():
        page.select_option("[data-testid=team-switch]", "globex")
    assert page.inner_text("[data-testid=role]") == "viewer"
    page.goto(f"/registry/compare/?run={run.id}")
    with page.expect_navigation():
        page.select_option("[data-testid=compare-suite-select]", "core")
    assert "suite=core" in page.url

    # A refused socket stops and says why.
    page.goto("/")
    assert page.evaluate(REFUSAL, f"/ws/runs/{foreign_run.id + 100_000}/") == "run not found"
    assert page.evaluate(REFUSAL, f"/ws/runs/{foreign_run.id}/") == "run not found"  # as a missing one
    signed_out = server.page(browser, "csp-signed-out")
    signed_out.goto("/login/")
    assert signed_out.evaluate(REFUSAL, f"/ws/runs/{run.id}/") == "signed out"
