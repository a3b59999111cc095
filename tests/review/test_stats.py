"""The review statistics against hand-computed values and scikit-learn."""
from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from controlplane.review import stats


def test_kappa_hand_computed():
    # confusion [[2, 0], [1, 1]]: po = 3/4, pe = (2*3 + 2*1) / 16 = 1/2 -> kappa = 0.5
    assert stats.cohen_kappa([0, 1, 1, 0], [0, 1, 0, 0]) == pytest.approx(0.5)
    # perfect agreement and agreement no better than chance
    assert stats.cohen_kappa([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert stats.cohen_kappa([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0)
    # one label used by both raters: undefined, not a number that looks like a result
    assert math.isnan(stats.cohen_kappa([1, 1, 1], [1, 1, 1]))


def test_weighted_kappa_hand_computed():
    # labels 1..3, a=[1,2,3], b=[1,3,3], linear weights |i-j|:
    # C = [[1,0,0],[0,0,1],[0,0,1]], so sum(W*C) = 1; every row of E = outer(rows, cols) / n is
    # [1/3, 0, 2/3], so sum(W*E) = 4/3 + 1 + 2/3 = 3; kappa = 1 - 1/3
    assert stats.cohen_kappa([1, 2, 3], [1, 3, 3], [1, 2, 3], "linear") == pytest.approx(1 - 1 / 3)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_matches_sklearn(weights):
    rng = np.random.default_rng(3)
    a = rng.integers(1, 6, 200)
    b = np.clip(a + rng.integers(-1, 2, 200), 1, 5)
    w = rng.uniform(0.5, 4.0, 200)
    labels = [1, 2, 3, 4, 5]
    assert stats.cohen_kappa(a, b, labels, weights) == pytest.approx(cohen_kappa_score(a, b, labels=labels, weights=weights))
    # inverse-propensity weights: sklearn's sample_weight
    assert stats.cohen_kappa(a, b, labels, weights, sample_weight=w) == pytest.approx(
        cohen_kappa_score(a, b, labels=labels, weights=weights, sample_weight=w))


def test_confusion_accuracy_mae_spearman():
    assert stats.confusion_matrix([1, 2, 2], [1, 1, 2], [1, 2]).tolist() == [[1, 0], [1, 1]]
    assert stats.accuracy([1, 2, 2], [1, 1, 2]) == pytest.approx(2 / 3)
    assert stats.accuracy([1, 2, 2], [1, 1, 2], sample_weight=[1, 2, 1]) == pytest.approx(2 / 4)
    assert stats.mae([0, 0.5, 1], [0, 1, 1]) == pytest.approx(0.5 / 3)
    # ranks a: 1,2,3,4 ; b: 1,3,2,4 -> d^2 = 0+1+1+0 = 2 -> rho = 1 - 6*2/(4*15) = 0.8
    assert stats.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        stats.confusion_matrix([1, 7], [1, 1], [1, 2])


def test_krippendorff_alpha_hand_computed():
    # two coders, o = [[2, 1], [1, 4]], n = 8: alpha = 1 - 7 * 2 / (2 * 3 * 5) = 8 / 15
    assert stats.krippendorff_alpha([[1, 1, 2, 2], [1, 2, 2, 2]]) == pytest.approx(8 / 15)
    # three coders with missing values give the same coincidences (units with one value drop out)
    nan = float("nan")
    three = [[1, 1, 2, 2], [1, 2, nan, 2], [nan, 2, nan, 2]]
    assert stats.krippendorff_alpha(three) == pytest.approx(8 / 15)
    # three values: o = [[2,1,0],[1,0,1],[0,1,2]], n_c = (3, 2, 3), n = 8
    data = [[1, 2, 3, 1], [1, 3, 3, 2]]
    assert stats.krippendorff_alpha(data, "nominal") == pytest.approx(1 - 7 * 4 / 42)
    assert stats.krippendorff_alpha(data, "interval") == pytest.approx(1 - 7 * 4 / 96)
    assert stats.krippendorff_alpha(data, "ordinal") == pytest.approx(1 - 7 * 25 / 600)
    assert stats.krippendorff_alpha([[1, 2, 3], [1, 2, 3]]) == pytest.approx(1.0)


def test_ipw_hand_computed():
    assert stats.ipw_mean([1, 0, 1], [0.5, 0.25, 1.0]) == pytest.approx(3 / 7)
    assert stats.ipw_weights([0.5, 1.0]).tolist() == [2.0, 1.0]
    with pytest.raises(ValueError):
        stats.ipw_weights([0.0, 0.5])


def test_bootstrap_ci_is_the_percentile_interval_of_resamples():
    x = np.array([0, 1, 1, 0, 1, 1, 1, 0, 1, 1], dtype=float)
    lo, hi = stats.bootstrap_ci(lambda v: float(v.mean()), x, n_boot=200, seed=7)
    rng = np.random.default_rng(7)
    reps = [x[rng.integers(0, x.size, x.size)].mean() for _ in range(200)]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))
    assert lo <= x.mean() <= hi
    assert stats.bootstrap_ci(lambda v: float(v.mean()), np.ones(5)) == (1.0, 1.0)
    assert all(math.isnan(v) for v in stats.bootstrap_ci(lambda v: float(v.mean()), np.array([])))


def test_bootstrap_interval_covers_kappa_of_a_large_sample():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, 400)
    b = np.where(rng.random(400) < 0.85, a, 1 - a)
    k = stats.cohen_kappa(a, b, [0, 1])
    lo, hi = stats.bootstrap_ci(lambda x, y: stats.cohen_kappa(x, y, [0, 1]), a, b, n_boot=300)
    assert lo < k < hi and hi - lo < 0.2


def test_report_has_every_metric_warnings_and_reliability():
    judge = [1, 2, 3, 4, 5, 5, 4, 2]
    human = [1, 2, 3, 5, 5, 4, 4, 1]
    r = stats.agreement_report(judge, human, fmt="ordinal", propensity=[0.5] * 8, n_boot=100,
                               reviewer_table=[[1, 2, 3, 5], [1, 2, 4, 5]])
    assert r["kappa_weights"] == "quadratic"
    assert set(r["metrics"]) == {"accuracy", "kappa", "spearman", "mae"}
    m = r["metrics"]["kappa"]
    assert m["value"] == pytest.approx(stats.cohen_kappa(judge, human, [1, 2, 3, 4, 5], "quadratic"))
    assert m["ipw"] == pytest.approx(m["value"])  # equal propensities change nothing
    assert m["ci"][0] <= m["ci"][1]
    assert r["warnings"] and "fewer than 30" in r["warnings"][0]
    assert r["krippendorff_alpha"] is not None
    assert sum(b["count"] for b in r["reliability"]) == 8
    assert np.array(r["confusion"]["matrix"]).sum() == 8


def test_reliability_diagram():
    rows = stats.reliability_diagram([0.05, 0.15, 0.95, 0.92], [0, 1, 1, 1], bins=10)
    assert [(r["lo"], r["count"], r["human_pass_rate"]) for r in rows] == [(0.0, 1, 0.0), (0.1, 1, 1.0), (0.9, 2, 1.0)]
