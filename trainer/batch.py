"""A step's batch as tensors and figures: trajectories packed for the policy's forward, scored, and
their rewards and outcome metrics.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import torch

from trainer.episodes import Trajectory
from trainer.integrity import integrity_metrics, is_canary, trains
from trainer.models.lean import LeanLlama, distinct_prompts
from trainer.outcomes import Outcome


def pack_batch(trajs: Sequence[Trajectory], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-padded training tensors for a list of trajectories.

    input_ids, attention_mask: (B, T); targets, loss_mask, old_logp: (B, T-1), aligned so that
    position t holds the logprob of token t+1 predicted from logits at t.
    """
    length = max(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    ids, attn, mask, old = [], [], [], []
    for t in trajs:
        p, r = len(t.prompt_ids), len(t.response_ids)
        tail = length - p - r
        ids.append(t.prompt_ids + t.response_ids + [pad_id] * tail)
        attn.append([1] * (p + r) + [0] * tail)
        mask.append([0.0] * p + list(t.loss_mask) + [0.0] * tail)
        old.append([0.0] * p + list(t.behaviour_logprobs) + [0.0] * tail)
    ids = torch.tensor(ids, dtype=torch.long)
    return {"input_ids": ids.to(device), "attention_mask": torch.tensor(attn).to(device),
            "targets": ids[:, 1:].to(device),  # (B, T-1)
            "loss_mask": torch.tensor(mask, dtype=torch.float32)[:, 1:].to(device),  # (B, T-1)
            "old_logp": torch.tensor(old, dtype=torch.float32)[:, 1:].to(device)}  # (B, T-1)


def pack_responses(trajs: Sequence[Trajectory], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Training tensors with each distinct prompt once (the lean forward's shared-prompt layout).

    prompts, prompt_mask: (U, L) left-padded; rows: (B,) the prompt of each trajectory;
    targets (the response tokens), response_mask (1 on them), loss_mask, old_logp: (B, R)
    right-padded.
    """
    prompts, prompt_mask, rows = distinct_prompts([t.prompt_ids for t in trajs], pad_id, device)
    span = max(len(t.response_ids) for t in trajs)
    tail = [span - len(t.response_ids) for t in trajs]
    return {"prompts": prompts, "prompt_mask": prompt_mask, "rows": rows,
            "targets": torch.tensor([t.response_ids + [pad_id] * n for t, n in zip(trajs, tail)],
                                    dtype=torch.long).to(device),  # (B, R)
            "response_mask": torch.tensor([[1] * len(t.response_ids) + [0] * n for t, n in zip(trajs, tail)],
                                          dtype=torch.long).to(device),  # (B, R)
            "loss_mask": torch.tensor([list(t.loss_mask) + [0.0] * n for t, n in zip(trajs, tail)],
                                      dtype=torch.float32).to(device),  # (B, R)
            "old_logp": torch.tensor([list(t.behaviour_logprobs) + [0.0] * n for t, n in zip(trajs, tail)],
                                     dtype=torch.float32).to(device)}  # (B, R)


def score(model, lean: LeanLlama | None, trajs: Sequence[Trajectory], pad_id: int, device,
          reference=None, reference_lean: LeanLlama | None = None) -> dict[str, torch.Tensor]:
    """Packed tensors of ``trajs`` plus ``logits`` (B, T, V) aligned with ``targets`` (B, T), and
    ``ref_logits`` when a reference model is given (without gradient).

    With a lean forward each distinct prompt is computed once (:func:`pack_responses`);
    otherwise the model's own forward runs over whole right-padded sequences (:func:`pack_batch`).
    """
    if lean is not None:
        batch = pack_responses(trajs, pad_id, device)
        args = (batch["prompts"], batch["prompt_mask"], batch["rows"], batch["targets"],
                batch["response_mask"])
        batch["logits"] = lean.response_logits(*args)  # (B, R, V)
        if reference is not None:
            with torch.no_grad():
                batch["ref_logits"] = reference_lean.response_logits(*args)
        return batch
    batch = pack_batch(trajs, pad_id, device)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    batch["logits"] = model(**inputs).logits[:, :-1]  # (B, T-1, V)
    if reference is not None:
        with torch.no_grad():
            batch["ref_logits"] = reference(**inputs).logits[:, :-1]
    return batch


def chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def rewards_of(trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards (N,), group ids (N,) and validity (N,); infrastructure outcomes and canaries are
    invalid (never trained on)."""
    rewards = torch.tensor([t.verification.reward or 0.0 for t in trajs], dtype=torch.float32)
    groups = torch.tensor([t.group for t in trajs], dtype=torch.long)
    valid = torch.tensor([trains(t) for t in trajs], dtype=torch.bool)
    return rewards, groups, valid


def outcome_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """reward/<domain>, pass_rate/<domain>, outcome/<domain>/<outcome>, infra_rate/<domain> (the
    share of infrastructure outcomes), response length, truncation, and the reward-hacking watch's
    ``hack/*`` (:func:`trainer.integrity.integrity_metrics`).

    Canaries (impossible by design) are left out of every figure but ``hack/*``: a domain's reward
    and pass rate are those of its real tasks.

    Rewards average the samples that have one: a domain (or a whole step) whose samples were all
    masked (infrastructure outcomes) gets no ``reward/<domain>`` (no ``reward/mean``) rather than a
    0 that would read as a policy that got everything wrong; its masked samples still count in
    ``outcome/<domain>/<outcome>`` and ``batch/infra_masked``.
    """
    out: dict[str, float] = integrity_metrics(trajs)
    trajs = [t for t in trajs if not is_canary(t.task)]
    by_domain: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_domain[t.task.domain].append(t)
    all_rewards = []
    for slug, ts in by_domain.items():
        rewards = [t.verification.reward for t in ts if t.verification.reward is not None]
        all_rewards += rewards
        if rewards:
            out[f"reward/{slug}"] = sum(rewards) / len(rewards)
            out[f"pass_rate/{slug}"] = sum(t.verification.outcome is Outcome.PASS
                                           for t in ts) / len(rewards)
        for outcome in {t.verification.outcome for t in ts}:
            out[f"outcome/{slug}/{outcome.value}"] = float(sum(t.verification.outcome is outcome
                                                               for t in ts))
        out[f"infra_rate/{slug}"] = sum(t.verification.is_infrastructure for t in ts) / len(ts)
        out[f"response/length/{slug}"] = sum(sum(t.loss_mask) for t in ts) / len(ts)
    if all_rewards:  # a step whose every sample was masked has no reward (not 0): no point at all
        out["reward/mean"] = sum(all_rewards) / len(all_rewards)
    out["response/length"] = sum(sum(t.loss_mask) for t in trajs) / max(len(trajs), 1)
    out["response/truncated_frac"] = sum(t.truncated for t in trajs) / max(len(trajs), 1)
    out["batch/infra_masked"] = float(sum(t.verification.is_infrastructure for t in trajs))
    out["batch/completions"] = float(len(trajs))
    return out
