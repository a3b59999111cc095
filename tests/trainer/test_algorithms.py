"""Advantages against hand-computed examples; clip-higher; masking; aggregation."""
from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import (STD_EPS, clipped_policy_loss, group_advantages,
                                zero_variance_groups)

ALL = torch.ones(4, dtype=torch.bool)
ONE_GROUP = torch.zeros(4, dtype=torch.long)


def test_grpo_by_hand():
    # rewards 1,0,0,0: mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = group_advantages(torch.tensor([1., 0., 0., 0.]), ONE_GROUP, ALL)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + STD_EPS)
    assert torch.allclose(adv, expected)
    assert adv.tolist() == pytest.approx([1.4997, -0.4999, -0.4999, -0.4999], abs=1e-4)


def test_dr_grpo_only_centres():
    adv = group_advantages(torch.tensor([1., 0., 0., 0.]), ONE_GROUP, ALL, scale=False)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rloo_by_hand():
    # each sample against the mean of the other three
    adv = group_advantages(torch.tensor([1., 0., 0., 0.]), ONE_GROUP, ALL, estimator="rloo")
    assert adv.tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_groups_are_independent():
    rewards = torch.tensor([1., 0., 0.5, 0.5, 1., 1.])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    valid = torch.ones(6, dtype=torch.bool)
    adv = group_advantages(rewards, groups, valid, scale=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0, 0, 0, 0])
    assert zero_variance_groups(rewards, groups, valid) == {1, 2}


def test_infrastructure_samples_are_masked_not_zero():
    # sample 3 had a sandbox error: it must not count as reward 0 in the baseline
    rewards = torch.tensor([1., 1., 0., 0.])
    valid = torch.tensor([True, True, True, False])
    adv = group_advantages(rewards, ONE_GROUP, valid, scale=False)
    assert adv.tolist() == pytest.approx([1 / 3, 1 / 3, -2 / 3, 0.0])  # mean of valid = 2/3
    wrong = group_advantages(rewards, ONE_GROUP, ALL, scale=False)
    assert wrong[0] != adv[0]
    # a group with a single valid sample has no signal
    alone = group_advantages(rewards, ONE_GROUP, torch.tensor([True, False, False, False]))
    assert alone.tolist() == [0, 0, 0, 0]
    assert zero_variance_groups(rewards, ONE_GROUP, torch.tensor([True, True, False, False])) == {0}


def grad_of_ratio(ratio: float, adv: float, clip_low=0.2, clip_high=0.28) -> float:
    """d loss / d logp for one token whose importance ratio is ``ratio``."""
    logp = torch.tensor([[float(torch.log(torch.tensor(ratio)))]], requires_grad=True)
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1),
                                  clip_low=clip_low, clip_high=clip_high, normalizer=1.0)
    loss.backward()
    return float(logp.grad)


def test_clip_higher_separates_low_and_high():
    # positive advantage: gradient survives up to 1 + clip_high (1.28), not beyond
    assert grad_of_ratio(1.25, 1.0) == pytest.approx(-1.25)  # symmetric 0.2 clip would zero this
    assert grad_of_ratio(1.25, 1.0, clip_high=0.2) == 0.0
    assert grad_of_ratio(1.30, 1.0) == 0.0
    # negative advantage: clipped below 1 - clip_low (0.8), unaffected by clip_high
    assert grad_of_ratio(0.85, -1.0) == pytest.approx(0.85)
    assert grad_of_ratio(0.75, -1.0) == 0.0
    assert grad_of_ratio(1.5, -1.0) == pytest.approx(1.5)  # pessimistic side never clipped


def test_clip_fraction_counts_clipped_tokens():
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5, 1.1]]))
    _, stats = clipped_policy_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), torch.ones(1, 4),
                                   clip_low=0.2, clip_high=0.28, normalizer=4.0)
    assert stats.clipped_tokens == 1.0 and stats.tokens == 4.0  # only 1.5 (> 1.28, adv > 0)


def test_token_and_sequence_aggregation():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1., 1., 1.], [1., 0., 0.]])
    adv = torch.tensor([1.0, 2.0])
    token, _ = clipped_policy_loss(logp, torch.zeros(2, 3), adv, mask, clip_low=0.2, clip_high=0.2,
                                   aggregation="token", normalizer=4.0)
    seq, _ = clipped_policy_loss(logp, torch.zeros(2, 3), adv, mask, clip_low=0.2, clip_high=0.2,
                                 aggregation="sequence", normalizer=2.0)
    assert float(token) == pytest.approx(-(3 * 1 + 2) / 4)  # every token weighs the same
    assert float(seq) == pytest.approx(-(1 + 2) / 2)  # every sequence weighs the same


def test_micro_batches_sum_to_the_full_batch_loss():
    torch.manual_seed(0)
    logp, old = torch.randn(6, 5) * 0.1, torch.randn(6, 5) * 0.1
    mask = (torch.rand(6, 5) > 0.3).float()
    adv = torch.randn(6)
    kw = dict(clip_low=0.2, clip_high=0.28, normalizer=float(mask.sum()))
    full, _ = clipped_policy_loss(logp, old, adv, mask, **kw)
    parts = sum(clipped_policy_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], **kw)[0]
                for i in range(0, 6, 2))
    assert float(parts) == pytest.approx(float(full), abs=1e-6)


def test_kl_term_is_zero_at_the_reference_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0]])
    _, same = clipped_policy_loss(logp, logp, torch.zeros(1), torch.ones(1, 2), clip_low=0.2,
                                  clip_high=0.2, normalizer=2, ref_logp=logp, kl_coef=0.1)
    _, moved = clipped_policy_loss(logp, logp, torch.zeros(1), torch.ones(1, 2), clip_low=0.2,
                                   clip_high=0.2, normalizer=2, ref_logp=logp - 0.5, kl_coef=0.1)
    assert same.kl_sum == pytest.approx(0.0) and moved.kl_sum > 0


def test_balanced_domains_get_the_same_share_of_the_gradient_whatever_their_lengths():
    """Domain a's completions are three times as long as b's: without balance its tokens take 3/4
    of the policy gradient; with ``domain_balance: equal`` each domain takes half, in both loss
    aggregations, and the loss's normaliser is unchanged."""
    import torch

    from trainer.algorithms import clipped_policy_loss, domain_balance_weights

    domains = ["a", "a", "b", "b"]
    lengths = [6, 6, 2, 2]
    mask = torch.tensor([[1.0] * n + [0.0] * (6 - n) for n in lengths])  # (4, 6)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    valid = torch.tensor([True] * 4)

    def share_of_a(weights: torch.Tensor, aggregation: str) -> float:
        logp = torch.zeros(4, 6, requires_grad=True)
        normalizer = float(mask.sum()) if aggregation == "token" else 4.0
        loss, _ = clipped_policy_loss(logp, torch.zeros(4, 6), adv * weights, mask, clip_low=0.2, clip_high=0.28,
                                      aggregation=aggregation, normalizer=normalizer)
        loss.backward()
        grad = logp.grad.abs().sum(-1)  # (4,)
        return float(grad[:2].sum() / grad.sum())

    assert share_of_a(torch.ones(4), "token") == pytest.approx(0.75)
    sizes = torch.tensor([float(n) for n in lengths])
    assert share_of_a(domain_balance_weights(domains, sizes, valid), "token") == pytest.approx(0.5)
    assert share_of_a(domain_balance_weights(domains, torch.ones(4), valid), "sequence") == pytest.approx(0.5)
    # An invalid sample weighs nothing, and a domain left with none is not counted.
    w = domain_balance_weights(domains, sizes, torch.tensor([True, True, False, False]))
    assert w.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_importance_health_sees_a_policy_that_drifted_from_the_engine():
    """Weights from logprobs: equal policies give mean 1 and ESS 1; a trainer that puts far more
    mass on a few sampled tokens than the engine did gives a spread-out batch whose ESS falls."""
    from trainer.algorithms import importance_health, importance_sums

    engine = torch.log(torch.full((2, 4), 0.25))
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    same = importance_health(*importance_sums(engine, engine, mask), float(mask.sum()))
    assert same == {"health/is_weight_mean": 1.0, "health/is_weight_std": 0.0, "health/ess": 1.0}
    trainer = engine.clone()
    trainer[0, 0] = torch.log(torch.tensor(0.99))  # one token: w = 3.96
    trainer[0, 1:] = torch.log(torch.tensor(0.01))  # the rest: w = 0.04
    trainer[1, :] = torch.log(torch.tensor(0.01))
    drift = importance_health(*importance_sums(trainer, engine, mask), float(mask.sum()))
    assert drift["health/ess"] < 0.3 and drift["health/is_weight_std"] > 1.0
    huge = importance_health(*importance_sums(engine + 1e4, engine, mask), float(mask.sum()))
    assert all(math.isfinite(v) for v in huge.values()) and huge["health/is_weight_mean"] > 1e8
