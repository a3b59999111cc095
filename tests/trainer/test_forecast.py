"""ScaleRL's curve fitted on synthetic runs whose parameters are known (trainer/forecast.py)."""
from __future__ import annotations

import random

import pytest

from trainer.forecast import MIN_POINTS, Curve, fit_curve, forecast

TRUTH = [Curve(a=0.8, b=1.5, c_mid=1e5), Curve(a=0.35, b=0.7, c_mid=3e7), Curve(a=0.95, b=3.0, c_mid=2e3)]


def _run(truth: Curve, *, points: int = 16, noise: float = 0.01, seed: int = 3, upto: float = 30.0) -> tuple[list[float], list[float]]:
    """Held-out results at log-spaced compute from ``c_mid / 100`` to ``upto * c_mid``, with noise."""
    rng = random.Random(seed)
    lo, hi = truth.c_mid / 100, truth.c_mid * upto
    xs = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    return xs, [truth(x) + rng.gauss(0, noise) for x in xs]


@pytest.mark.parametrize("truth", TRUTH, ids=["scalerl-like", "slow", "sharp"])
def test_the_fit_recovers_known_parameters(truth):
    xs, ys = _run(truth)
    fit = fit_curve(xs, ys)
    assert fit.a == pytest.approx(truth.a, abs=0.03)
    assert fit.b == pytest.approx(truth.b, rel=0.25)
    assert fit.c_mid == pytest.approx(truth.c_mid, rel=0.3)


@pytest.mark.parametrize("truth", TRUTH, ids=["scalerl-like", "slow", "sharp"])
def test_the_95_percent_band_holds_the_truth_in_most_noise_draws_and_brackets_the_compute_to_a_target(truth):
    """A bootstrap band under-covers a little (measured: 31 of 36 draws over the three curves);
    it holds the true asymptote in at least two thirds of 12 noise draws of each curve."""
    target = truth.a * 0.75
    held, reached = 0, 0
    for seed in range(12):
        f = forecast(*_run(truth, seed=seed), target=target)
        held += f.asymptote_band[0] <= truth.a <= f.asymptote_band[1]
        c_lo, c_hi = f.compute_band
        reached += c_lo <= truth.compute_for(target) <= (c_hi if c_hi is not None else float("inf"))
        assert f.compute_to_target == pytest.approx(truth.compute_for(target), rel=0.35)
    assert held >= 8 and reached >= 8


def test_a_fit_on_the_first_30_percent_of_compute_brackets_where_the_run_ends():
    """What the run page shows early: the band is wider, and still holds the final reward."""
    truth = TRUTH[0]
    xs, ys = _run(truth, points=24, upto=30.0)
    early = [(x, y) for x, y in zip(xs, ys) if x <= 0.3 * xs[-1]]
    f = forecast([x for x, _ in early], [y for _, y in early], target=0.6)
    lo, hi = f.asymptote_band
    assert lo <= truth.a <= hi
    assert hi - lo > forecast(xs, ys).asymptote_band[1] - forecast(xs, ys).asymptote_band[0]  # less known early
    at_end = forecast([x for x, _ in early], [y for _, y in early], at=xs[-1])
    p_lo, p_hi = at_end.predicted_band
    assert p_lo <= truth(xs[-1]) <= p_hi and at_end.predicted == pytest.approx(truth(xs[-1]), abs=0.05)


def test_a_run_from_a_fine_tuned_base_starts_above_zero():
    """ScaleRL's R0: a run whose base already earns 0.3 is fitted with its start, and a target at
    or below it takes no compute."""
    truth = Curve(a=0.9, b=1.2, c_mid=5e4, r0=0.3)
    fit = fit_curve(*_run(truth, noise=0.005))
    assert fit.r0 == pytest.approx(0.3, abs=0.05) and fit.a == pytest.approx(0.9, abs=0.03)
    assert truth.compute_for(0.25) == 0.0 and truth(0) == 0.3


def test_tiny_targets_and_huge_computes_do_not_overflow():
    xs, ys = _run(Curve(a=0.8, b=0.2, c_mid=1e5), noise=0.1)
    f = forecast(xs, ys, target=1e-40, at=1e300)
    assert f.compute_to_target is not None and f.predicted == pytest.approx(f.curve.a, abs=1e-6)
    assert Curve(a=0.8, b=0.1, c_mid=1e300).compute_for(0.79) is None  # beyond any float compute: never


def test_a_target_at_or_above_the_asymptote_is_never_reached():
    truth = TRUTH[0]
    xs, ys = _run(truth, noise=0.0)
    f = forecast(xs, ys, target=0.9)
    assert f.compute_to_target is None and f.reach_share < 0.05 and f.compute_band == (None, None)
    assert truth.compute_for(0.8) is None and truth.compute_for(0.0) == 0.0  # reached at no compute


def test_too_few_results_give_no_curve_and_say_why():
    f = forecast([10.0, 20.0, 20.0, 0.0], [0.1, 0.2, 0.25, 0.0], target=0.5)
    assert f.curve is None and f.used == 3 and f"needs {MIN_POINTS}" in f.note
    assert forecast([1.0, 2.0, 3.0, 4.0], [0.1, float("nan"), 0.2, 0.3]).curve is None  # a non-finite result is left out


def test_the_band_is_the_same_for_the_same_points():
    xs, ys = _run(TRUTH[1])
    assert forecast(xs, ys, target=0.2).to_dict() == forecast(xs, ys, target=0.2).to_dict()
