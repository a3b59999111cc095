"""A run's forecast (controlplane/runs/forecast.py): each domain's held-out reward against the
compute the run had spent, fitted with ScaleRL's curve; in the API and on the run page."""
from __future__ import annotations

import pytest

from controlplane.runs.services import run_record_step
from tests.controlplane.test_usage import client_for, driven
from trainer.forecast import Curve

pytestmark = pytest.mark.django_db

TRUTH = Curve(a=0.7, b=1.2, c_mid=15_000.0)
TOKENS_PER_STEP = 1000


def _trained(run, steps: int = 40, *, parity_evals: int = 2) -> None:
    """Each step generates 1000 tokens; every second step evaluates addition on the known curve
    (a small fixed wobble), and parity only ``parity_evals`` times."""
    for step in range(1, steps + 1):
        metrics = {}
        if step % 2 == 0:
            c = TOKENS_PER_STEP * step
            metrics["eval/reward/addition"] = TRUTH(c) + (0.004 if step % 4 else -0.004)
            if step // 2 <= parity_evals:
                metrics["eval/reward/parity"] = 0.3
        run_record_step(run=run, worker="w1", step=step, metrics=metrics, samples=[], verifier_versions={},
                        usage={"": {"wall_s": 1.0, "cpu_s": 2.0, "gpu_s": 0.0}, "addition": {"generated_tokens": TOKENS_PER_STEP}})


def test_the_forecast_recovers_where_a_domain_saturates_and_the_compute_to_a_target(world):
    run = driven(world.team, domains=[world.domain, world.domain2])
    _trained(run)
    body = client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/forecast?target=0.5").json()
    assert body["compute"] == "tokens" and body["spent"] == 40 * TOKENS_PER_STEP and body["target"] == 0.5
    addition, parity = body["domains"]
    assert addition["domain"] == "addition" and len(addition["points"]) == 20
    lo, hi = addition["asymptote_band"]
    assert lo <= TRUTH.a <= hi and addition["curve"]["a"] == pytest.approx(TRUTH.a, abs=0.05)
    c_lo, c_hi = addition["compute_band"]
    assert c_lo <= TRUTH.compute_for(0.5) <= c_hi
    assert addition["final"]["compute"] == 40 * TOKENS_PER_STEP and len(addition["curve_points"]) == 40
    # the curve's band for the chart: at every compute of the curve, around it
    band = addition["curve_band"]
    assert [c for c, _, _ in band] == [c for c, _ in addition["curve_points"]]
    assert all(lo <= r <= hi for (_, lo, hi), (_, r) in zip(band, addition["curve_points"]))
    assert band[-1][2] - band[-1][1] > band[0][2] - band[0][1]  # wider far past the results than at the first
    # the budget's end (100 steps at 1000 tokens a step so far): the curve's reward there, banded
    assert addition["at"] == 100 * TOKENS_PER_STEP
    p_lo, p_hi = addition["predicted_band"]
    assert p_lo <= TRUTH(100 * TOKENS_PER_STEP) <= p_hi
    assert parity["curve"] is None and "needs 4" in parity["note"] and len(parity["points"]) == 2


def test_a_target_above_the_asymptote_is_never_reached(world):
    run = driven(world.team, domains=[world.domain])
    _trained(run)
    addition = client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/forecast?target=0.95").json()["domains"][0]
    assert addition["compute_to_target"] is None and addition["reach_share"] < 0.05
    page = client_for(world.users["viewer"]).get(f"/runs/{run.id}/?target=0.95").content.decode()
    assert 'data-testid="forecast-unreachable"' in page


@pytest.mark.parametrize("query, field", [("target=1.5", "target"), ("target=nan", "target"), ("target=half", "target"),
                                          ("target=0", "target"), ("compute=watts", "compute")])
def test_a_bad_option_names_its_field_in_the_api_and_beside_the_form(world, query, field):
    run = driven(world.team, domains=[world.domain])
    r = client_for(world.users["viewer"]).get(f"/api/runs/{run.id}/forecast?{query}")
    assert r.status_code == 422 and [e["path"] for e in r.json()["errors"]] == [field]
    page = client_for(world.users["viewer"]).get(f"/runs/{run.id}/?{query}")
    assert page.status_code == 200 and 'data-testid="forecast-error"' in page.content.decode()


def test_the_run_page_shows_each_domains_asymptote_and_a_new_evaluation_refits(world):
    run = driven(world.team, domains=[world.domain, world.domain2])
    _trained(run, steps=10)
    viewer = client_for(world.users["viewer"])
    assert len(viewer.get(f"/api/runs/{run.id}/forecast").json()["domains"][0]["points"]) == 5
    page = viewer.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="forecast-row" data-domain="addition" data-asymptote=' in page
    run_record_step(run=run, worker="w1", step=11, metrics={"eval/reward/addition": 0.2}, samples=[], verifier_versions={},
                    usage={"": {"wall_s": 1.0}, "addition": {"generated_tokens": TOKENS_PER_STEP}})
    assert len(viewer.get(f"/api/runs/{run.id}/forecast").json()["domains"][0]["points"]) == 6  # not the cached fit


def test_another_teams_run_forecast_is_not_found(world):
    run = driven(world.other, domains=[world.other_domain])
    assert client_for(world.users["admin"]).get(f"/api/runs/{run.id}/forecast").status_code == 404


def test_the_compare_page_sets_each_runs_forecast_side_by_side(world):
    first, second = driven(world.team, domains=[world.domain], name="a"), driven(world.team, domains=[world.domain], name="b")
    _trained(first)
    _trained(second, steps=6)  # three evaluations: too few for a fit
    viewer = client_for(world.users["viewer"])
    page = viewer.get(f"/runs/compare/?run={first.id}&run={second.id}&target=0.5").content.decode()
    row = page[page.index('data-testid="compare-forecast-row" data-domain="addition"'):]
    row = row[:row.index("</tr>")]
    assert row.count("data-asymptote=") == 1 and "needs 4" in row
    bad = viewer.get(f"/runs/compare/?run={first.id}&run={second.id}&target=2").content.decode()
    assert 'data-testid="forecast-error"' in bad and "compare-forecast-row" not in bad


def test_a_forecast_below_target_rule_fires_when_even_the_bands_top_saturates_under_it(world):
    """The forecast at each evaluation is written as ``forecast/asymptote*`` points (the driver's
    held-out observer calls run_record_forecast): a ``below`` rule on the band's top, threshold the
    target, fires for a domain heading below it and not for one heading above."""
    from controlplane.alerts.models import AlertFiring, AlertRule
    from controlplane.alerts.services import alerts_after_step
    from controlplane.runs.forecast import run_record_forecast
    from controlplane.runs.models import MetricPoint

    run = driven(world.team, domains=[world.domain])
    _trained(run)
    AlertRule.objects.create(team=world.team, name="Forecast below 0.8", condition="below",
                             metric="forecast/asymptote_high/*", threshold=0.8, window=1, channels=[{"type": "in_app"}])
    AlertRule.objects.create(team=world.team, name="Forecast below 0.5", condition="below",
                             metric="forecast/asymptote_high/*", threshold=0.5, window=1, channels=[{"type": "in_app"}])
    assert run_record_forecast(run=run, step=40) == 2 and run_record_forecast(run=run, step=40) == 2
    assert MetricPoint.objects.filter(run=run, key__startswith="forecast/").count() == 2  # a retried write adds nothing
    high = MetricPoint.objects.get(run=run, step=40, key="forecast/asymptote_high/addition")
    assert high.domain == "addition" and TRUTH.a <= high.value < 0.8
    alerts_after_step(run=run, step=40)
    assert [f.rule.name for f in AlertFiring.objects.filter(run=run)] == ["Forecast below 0.8"]
