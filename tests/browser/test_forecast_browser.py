"""The run page's forecast card draws each fitted domain: its held-out results, the fitted curve
and the curve's bootstrap band, with the target reward asked for, on a log compute axis."""
from __future__ import annotations

import pytest

from tests import factories
from tests.browser.conftest import browser_user, screenshot
from tests.controlplane.test_forecast_api import _trained
from tests.controlplane.test_usage import driven

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_the_run_page_plots_each_fitted_domain_with_its_band_and_points(server, browser):
    team = factories.team("acme")
    browser_user(team, "viewer", "vera")
    run = driven(team, domains=[factories.domain("addition"), factories.domain("parity")])
    _trained(run)  # addition: 20 evaluations on a known curve; parity: 2, too few to fit

    page = server.logged_in_page(browser, "forecast", "vera")
    page.goto(f"/runs/{run.id}/?target=0.5#forecast")
    plot = page.locator("[data-testid=forecast-plot][data-domain=addition]")
    plot.wait_for()
    page.wait_for_function("() => document.querySelector('[data-testid=forecast-plot][data-domain=addition]').dataset.traces === '4'")
    assert page.locator("[data-testid=forecast-plot]").count() == 1  # parity has no fit: its row says why
    drawn = page.evaluate("""() => {
        const gd = document.querySelector('[data-testid=forecast-plot][data-domain=addition]');
        return {names: gd.data.map((t) => t.name), points: gd.data[3].x.length, log: gd._fullLayout.xaxis.type,
                band: gd.data[0].y.every((hi, i) => hi >= gd.data[1].y[i]), fill: gd.data[1].fill,
                target: gd._fullLayout.shapes.some((s) => s.y0 === 0.5 && s.y1 === 0.5),
                svgPoints: gd.querySelectorAll('.scatterlayer .trace:last-child .point').length};
    }""")
    assert drawn["names"][1:] == ["95% band", drawn["names"][2], "held-out results"] and drawn["names"][2].startswith("fit (A 0.")
    assert drawn["points"] == 20 and drawn["svgPoints"] == 20  # every held-out result is drawn
    assert drawn["log"] == "log" and drawn["band"] and drawn["fill"] == "tonexty" and drawn["target"]
    path = screenshot(page, "forecast-plot")
    page.locator("[data-testid=forecast]").screenshot(path=str(path.with_name("forecast-card.png")))
