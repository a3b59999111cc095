"""Advantage estimators and the clipped policy loss (GRPO, Dr.GRPO, RLOO; DAPO clip-higher).

Samples come flat, with the index of the group (task) each belongs to. ``valid`` is False for
samples whose verification was an infrastructure failure: they get no advantage, take no part in
their group's baseline, and are masked out of the loss.

>>> import torch
>>> r = torch.tensor([1., 0., 0., 1.]); g = torch.tensor([0, 0, 0, 0]); v = torch.ones(4, dtype=torch.bool)
>>> [round(a, 4) for a in group_advantages(r, g, v, estimator="rloo").tolist()]
[0.6667, -0.6667, -0.6667, 0.6667]
"""
from __future__ import annotations

import math

from dataclasses import dataclass

import torch

STD_EPS = 1e-4


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor, *,
                     estimator: str = "grpo", scale: bool = True) -> torch.Tensor:
    """Advantages (N,) from rewards (N,), group ids (N,) and a validity mask (N,).

    - ``grpo``: (r - mean_g) / (std_g + 1e-4), std unbiased; ``scale=False`` drops the division
      (Dr.GRPO).
    - ``rloo``: r - mean of the *other* valid samples of the group = n/(n-1) (r - mean_g).
    A group with fewer than two valid samples, and every invalid sample, gets advantage 0.
    """
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    for g in groups.unique():
        members = (groups == g) & valid  # (N,)
        n = int(members.sum())
        if n < 2:
            continue
        r = rewards[members].float()  # (n,)
        centred = r - r.mean()
        if estimator == "grpo":
            adv[members] = centred / (r.std() + STD_EPS) if scale else centred
        elif estimator == "rloo":
            adv[members] = centred * n / (n - 1)
        else:
            raise ValueError(f"unknown advantage estimator {estimator!r}")
    return adv


def domain_balance_weights(domains: list[str], sizes: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-sample weights (N,) that give each domain of the batch the same share of the policy
    loss, whatever its share of the batch's tokens (``sizes``: each sample's response tokens) or
    sequences (``sizes`` all 1). Each valid sample of domain d gets ``S / (D * S_d)``: ``S`` the
    valid samples' total size, ``S_d`` domain d's, ``D`` the domains with a valid sample; so the
    weighted sizes still sum to ``S`` (the loss's normaliser is unchanged) and each domain's sum to
    ``S / D``. Invalid samples get 0 (they are masked anyway).

    >>> w = domain_balance_weights(["a", "a", "b"], torch.tensor([30.0, 30.0, 20.0]), torch.tensor([True, True, True]))
    >>> [round(x, 4) for x in w.tolist()], float((w * torch.tensor([30.0, 30.0, 20.0])).sum())
    ([0.6667, 0.6667, 2.0], 80.0)
    """
    weights = torch.zeros(len(domains), dtype=torch.float32)
    present = sorted({d for d, ok in zip(domains, valid.tolist()) if ok})
    if not present:
        return weights
    total = float(sizes[valid].sum())
    for d in present:
        mine = torch.tensor([x == d for x in domains]) & valid  # (N,)
        share = float(sizes[mine].sum())
        if share > 0:
            weights[mine] = total / (len(present) * share)
    return weights


def zero_variance_groups(rewards: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor) -> set[int]:
    """Group ids whose valid rewards are all equal (no learning signal); dynamic sampling drops them."""
    flat = set()
    for g in groups.unique():
        r = rewards[(groups == g) & valid]
        if r.numel() < 2 or bool((r == r[0]).all()):
            flat.add(int(g))
    return flat


@dataclass
class LossStats:
    """Detached statistics of one loss evaluation (sums; divide by the token count)."""

    clipped_tokens: float
    """Tokens whose gradient the clip removed."""
    tokens: float
    """Tokens in the loss (mask sum)."""
    kl_sum: float
    """Sum of the k3 KL estimate over tokens (0 without a reference)."""


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                        mask: torch.Tensor, *, clip_low: float, clip_high: float,
                        aggregation: str = "token", normalizer: float,
                        ref_logp: torch.Tensor | None = None,
                        kl_coef: float = 0.0) -> tuple[torch.Tensor, LossStats]:
    """PPO-style clipped surrogate with separate low/high clip, summed then divided by ``normalizer``.

    logp, old_logp, mask: (B, T) over response tokens; adv: (B,). ``old_logp`` is the behaviour
    policy's (the rollout engine's) logprob. ``aggregation="token"``: sum over tokens, with
    ``normalizer`` = response tokens in the whole batch; ``"sequence"``: per-sequence token means
    summed, with ``normalizer`` = sequences in the batch. Summing the micro-batch losses gives the
    batch mean exactly, so gradient accumulation does not change the objective.
    """
    mask = mask.float()
    ratio = torch.exp(logp - old_logp)  # (B, T)
    a = adv[:, None]  # (B, 1)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)  # (B, T)
    per_token = -surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1  # (B, T) k3 estimate of KL(pi || ref)
        per_token = per_token + kl_coef * kl
    if aggregation == "token":
        loss = (per_token * mask).sum() / normalizer
    elif aggregation == "sequence":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / normalizer
    else:
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    with torch.no_grad():
        clipped = ((a > 0) & (ratio > 1 + clip_high)) | ((a < 0) & (ratio < 1 - clip_low))
        stats = LossStats(clipped_tokens=float((clipped.float() * mask).sum()),
                          tokens=float(mask.sum()), kl_sum=float((kl * mask).sum()))
    return loss, stats


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Logprob (B, T) of each target id (B, T) under logits (B, T, V) at the given temperature."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    return logp.gather(-1, targets[..., None]).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (B, T) of the tempered next-token distribution."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    return -(logp.exp() * logp).sum(-1)


IS_LOG_CLAMP = 20.0
"""Log importance weights are clamped to +-20 for the health statistics only (exp(20) is 4.9e8):
a weight that large is already an alarm, and an unclamped one overflows to inf."""


def importance_sums(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(sum of w, sum of w^2) over the masked tokens, where w = exp(trainer_logp - engine_logp) is
    each token's importance weight of the trainer's policy against the engine that sampled it."""
    w = torch.exp((trainer_logp - engine_logp).clamp(-IS_LOG_CLAMP, IS_LOG_CLAMP)) * mask
    return float(w.sum()), float((w * w).sum())


def importance_health(w_sum: float, w_sq: float, tokens: float) -> dict[str, float]:
    """The rollout importance weights' health, from :func:`importance_sums` over ``tokens`` tokens:
    their mean and spread (1 and 0 when the engine samples exactly the trainer's policy) and the
    normalised effective sample size (sum w)^2 / (n sum w^2), 1 when every weight is equal and
    towards 1/n when one token carries the batch. verl documents a healthy mean of 0.5 to 2.0 and an
    ESS above 0.3 (its rollout_is metrics). Empty when there were no tokens.

    >>> importance_health(4.0, 4.0, 4)
    {'health/is_weight_mean': 1.0, 'health/is_weight_std': 0.0, 'health/ess': 1.0}
    >>> h = importance_health(4.0, 16.0, 4)  # one weight of 4, three of 0
    >>> h["health/is_weight_mean"], round(h["health/is_weight_std"], 4), h["health/ess"]
    (1.0, 1.7321, 0.25)
    """
    if tokens <= 0:
        return {}
    mean = w_sum / tokens
    spread = math.sqrt(max(w_sq / tokens - mean * mean, 0.0))
    ess = (w_sum * w_sum) / (tokens * w_sq) if w_sq > 0 else 0.0
    return {"health/is_weight_mean": mean, "health/is_weight_std": spread, "health/ess": ess}
