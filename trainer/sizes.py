"""The sizes of a step that no single setting bounds: products of settings, each with a global bound.

:func:`trainer.config.load_config` checks every config against them (beside each setting's own
bound), the config schema lists them (``x-sizes``) and a team's ceilings may name them like a
setting (trainer/ceilings.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_SEQUENCES_PER_STEP = 65_536
"""``rollout.prompts_per_step`` times the group size (``rollout.n``, or ``sampler.max_samples``
with the adaptive budget) may not exceed this: each sequence is generated, kept and scored."""
MAX_TOKENS_PER_STEP = 1 << 26
"""The sequences of a step times the tokens of each (:func:`sequence_tokens`): every token of a
step is held in memory (ids and logprobs) until the update."""
MAX_EVAL_TASKS = 100_000
"""Held-out tasks one periodic evaluation answers: ``eval.tasks_per_domain`` times the domains."""
MAX_BATCH_TOKENS = 1 << 24
"""``rollout.batch_size`` (sequences generated together) and ``optimizer.micro_batch_size``
(sequences in one forward/backward) times the tokens of a sequence: what one forward pass holds
(KV cache, activations)."""


@dataclass(frozen=True)
class Size:
    """A size that no single setting bounds: a product of settings, with the global bound of its
    value. Checked by :func:`load_config`; a team's ceilings may name it like a setting."""

    name: str
    """The name a team ceiling uses, e.g. ``sequences_per_step``."""
    path: str
    """The setting an error is reported at (the one most worth lowering)."""
    bound: int
    """The largest value any config may have."""
    help: str
    """What it counts."""

    def value(self, cfg: Any) -> tuple[int, str]:
        """This size of ``cfg`` (a :class:`~trainer.config.TrainerConfig`) and how it was computed (for the error message)."""
        r, seq = cfg.rollout, sequence_tokens(cfg)
        group, group_path = ((cfg.sampler.max_samples, "sampler.max_samples") if cfg.sampler.adaptive_budget
                             else (r.n, "rollout.n"))
        if self.name == "sequences_per_step":
            return r.prompts_per_step * group, f"times {group_path}"
        if self.name == "tokens_per_step":
            return r.prompts_per_step * group * seq, f"times {group_path} times {seq} tokens a sequence"
        if self.name == "tokens_per_generation_batch":
            return r.batch_size * seq, f"times {seq} tokens a sequence"
        if self.name == "tokens_per_micro_batch":
            return cfg.optimizer.micro_batch_size * seq, f"times {seq} tokens a sequence"
        if self.name == "eval_tasks":  # nothing is evaluated while every_steps is 0
            return (cfg.eval.tasks_per_domain * len(cfg.domains) if cfg.eval.every_steps else 0,
                    f"times {len(cfg.domains)} domains")
        if self.name == "sft_check_tasks":  # no checks while until_pass_rate is 0 or the stage is off
            return (cfg.sft.check_tasks * len(cfg.domains) if cfg.sft.until_pass_rate > 0 and cfg.sft.steps else 0,
                    f"times {len(cfg.domains)} domains")
        raise KeyError(self.name)  # a bug in this module


SIZES: tuple[Size, ...] = (
    Size("sequences_per_step", "rollout.prompts_per_step", MAX_SEQUENCES_PER_STEP,
         "Sequences generated and scored in one step (prompts per step times the group size)."),
    Size("tokens_per_step", "rollout.prompts_per_step", MAX_TOKENS_PER_STEP,
         "Tokens held in one step (sequences per step times the tokens of a sequence)."),
    Size("tokens_per_generation_batch", "rollout.batch_size", MAX_BATCH_TOKENS,
         "Tokens generated together (rollout.batch_size times the tokens of a sequence)."),
    Size("tokens_per_micro_batch", "optimizer.micro_batch_size", MAX_BATCH_TOKENS,
         "Tokens in one forward/backward (optimizer.micro_batch_size times the tokens of a sequence)."),
    Size("eval_tasks", "eval.tasks_per_domain", MAX_EVAL_TASKS,
         "Held-out tasks answered by one periodic evaluation (eval.tasks_per_domain times the domains)."),
    Size("sft_check_tasks", "sft.check_tasks", MAX_EVAL_TASKS,
         "Training tasks answered by one check of sft.until_pass_rate (sft.check_tasks times the domains)."),
)
"""The products of settings bounded beside each setting's own bound, listed once."""


def sequence_tokens(cfg: Any) -> int:
    """The most tokens one sequence can hold: the prompt, then one turn's ``max_new_tokens`` (or the
    evaluation's when larger) or, with several turns, the episode's ``max_episode_tokens``.

    >>> from trainer.config import TrainerConfig
    >>> sequence_tokens(TrainerConfig())
    576
    """
    new = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens)
    if cfg.rollout.max_turns > 1:
        new = max(new, cfg.rollout.max_episode_tokens)
    return cfg.tokenizer.max_prompt_tokens + new
