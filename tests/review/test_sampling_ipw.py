"""Sampling designs and inverse-propensity weighting on a synthetic population with a known
judge-human agreement rate: skewed samples are biased, their IPW estimates are not."""
from __future__ import annotations

import numpy as np
import pytest

from controlplane.review import sampling, stats


def population(n: int = 6000, seed: int = 11):
    """Judge and rule verdicts, and the humans' verdicts: where judge and rule disagree the judge is
    usually wrong; where they agree it is usually right. Judge passes are rare (20%)."""
    rng = np.random.default_rng(seed)
    judge = (rng.random(n) < 0.2).astype(float)
    rule = np.where(rng.random(n) < 0.8, judge, 1 - judge)
    p_agree = np.where(judge == rule, np.where(judge == 1, 0.97, 0.9), 0.3)
    human = np.where(rng.random(n) < p_agree, judge, 1 - judge)
    return judge, rule, human


def _estimate(judge, human, draws):
    idx = np.array([d.index for d in draws])
    prop = np.array([d.propensity for d in draws])
    agree = (judge[idx] == human[idx]).astype(float)
    naive = agree.mean()
    ipw = stats.ipw_mean(agree, prop)
    lo, hi = stats.bootstrap_ci(lambda a, sample_weight: float(np.average(a, weights=sample_weight)), agree,
                                sample_weight=1 / prop, n_boot=1000, seed=5)
    return naive, ipw, (lo, hi)


def test_disagreement_targeted_sample_recovers_the_agreement_rate():
    judge, rule, human = population()
    truth = float((judge == human).mean())
    draws = sampling.sample_poisson(sampling.disagreement_weights(judge, rule), 500, np.random.default_rng(2))
    naive, ipw, (lo, hi) = _estimate(judge, human, draws)
    assert lo <= truth <= hi
    assert abs(ipw - truth) < 0.05
    assert naive < lo  # the unweighted sample rate is far off: disagreements are over-sampled


def test_stratified_sample_recovers_the_agreement_rate():
    judge, rule, human = population()
    truth = float((judge == human).mean())
    strata = sampling.score_strata(judge, "binary")
    draws = sampling.sample_stratified(strata, 400, np.random.default_rng(3))
    assert {d.stratum for d in draws} == {"0", "1"}
    assert sum(1 for d in draws if d.stratum == "1") == 200  # equal allocation
    naive, ipw, (lo, hi) = _estimate(judge, human, draws)
    assert lo <= truth <= hi
    assert abs(ipw - truth) < 0.05


def test_ipw_kappa_matches_the_population_kappa():
    judge, rule, human = population()
    truth = stats.cohen_kappa(judge, human, [0, 1])
    draws = sampling.sample_poisson(sampling.disagreement_weights(judge, rule), 800, np.random.default_rng(4))
    idx = np.array([d.index for d in draws])
    w = 1 / np.array([d.propensity for d in draws])
    lo, hi = stats.bootstrap_ci(lambda a, b, sample_weight: stats.cohen_kappa(a, b, [0, 1], sample_weight=sample_weight),
                                judge[idx], human[idx], sample_weight=w, n_boot=500, seed=1)
    assert lo <= truth <= hi


def test_propensities_are_the_design_inclusion_probabilities():
    rng = np.random.default_rng(0)
    weights = sampling.disagreement_weights([0, 1, 0, 1], [0, 0, 1, 1])
    pi = sampling.inclusion_probabilities(weights, 2)
    hits = np.zeros(4)
    for _ in range(4000):
        for d in sampling.sample_poisson(weights, 2, rng):
            hits[d.index] += 1
            assert d.propensity == pytest.approx(pi[d.index])
    assert hits / 4000 == pytest.approx(pi, abs=0.03)
    assert [d.propensity for d in sampling.sample_uniform(10, 3, rng)] == [0.3] * 3
