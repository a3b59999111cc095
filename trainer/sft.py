"""The supervised stage: next-token loss on reference answers, before RL.

Real post-training starts RL from a supervised model; the demo and the benches use a short SFT
stage to make a weak "base model" from random init. :class:`SupervisedStage` is a job's SFT
state: its own optimizer, its own task RNG and the steps taken, all saved in checkpoints.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable

import torch

from trainer.config import TrainerConfig
from trainer.optim import make_backend
from trainer.sampler import TaskSampler
from trainer.tasks.base import Task


def reference_text(task: Task) -> str:
    """The answer a task's SFT example ends with: ``meta['solution']`` or the string answer."""
    solution = task.meta.get("solution", task.answer)
    if not isinstance(solution, str):
        raise ValueError(f"task {task.domain}/{task.id} has no text solution for SFT")
    return solution


def sft_batch(tokenizer, tasks: list[Task], device, *, max_prompt_tokens: int | None = None,
              max_new_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """input_ids (B, T) right-padded; labels (B, T) with -100 everywhere but answer and eos.

    A prompt keeps its last ``max_prompt_tokens`` tokens (as a rollout's does) and an answer, with
    its eos, its first ``max_new_tokens``: a sequence is never longer than the trainer's bounds
    (``sequence_tokens``) allow, whatever the tasks hold."""
    rows, labels = [], []
    for task in tasks:
        prompt = tokenizer(task.prompt)["input_ids"]
        answer = tokenizer(reference_text(task), add_special_tokens=False)["input_ids"]
        answer = answer + [tokenizer.eos_token_id]
        if max_prompt_tokens is not None:
            prompt = prompt[-max_prompt_tokens:]
        if max_new_tokens is not None:
            answer = answer[:max_new_tokens]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), length), -100, dtype=torch.long)
    attn = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, :len(r)] = torch.tensor(r)
        lab[i, :len(l)] = torch.tensor(l)
        attn[i, :len(r)] = 1
    return {"input_ids": ids.to(device), "labels": lab.to(device), "attention_mask": attn.to(device)}


def sft_step(model, backend, tokenizer, tasks: list[Task], device, *, micro_batch_size: int | None = None,
             max_prompt_tokens: int | None = None, max_new_tokens: int | None = None) -> float:
    """One optimizer step of mean next-token cross-entropy on the answers; returns the loss.

    The forward and backward passes take ``micro_batch_size`` tasks at a time (all at once when
    None), each micro-batch's summed loss divided by the answer tokens of the whole batch, so the
    gradient is the whole batch's mean whatever the micro-batch size (as the RL update does)."""
    size = micro_batch_size or len(tasks)
    micro = [sft_batch(tokenizer, tasks[i:i + size], device, max_prompt_tokens=max_prompt_tokens,
                       max_new_tokens=max_new_tokens) for i in range(0, len(tasks), size)]
    normalizer = float(sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro)) or 1.0
    total = 0.0
    for batch in micro:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]),  # (B*(T-1), V)
            batch["labels"][:, 1:].reshape(-1),  # (B*(T-1),)
            ignore_index=-100, reduction="sum") / normalizer
        backend.backward(loss)
        total += float(loss.detach())
    backend.step()
    return total


class SupervisedStage:
    """SFT steps on tasks drawn with the job's domain weights; held-out tasks stay out of SFT too.

    The optimizer (constant learning rate ``sft.lr``, no warm-up) is made on the first step.
    """

    def __init__(self, model, tokenizer, sampler: TaskSampler, config: TrainerConfig, device):
        self.model, self.tokenizer, self.sampler, self.device = model, tokenizer, sampler, device
        self.config = config
        self.rng = random.Random(config.seed + 1)
        self.check_rng = random.Random(config.seed + 2)  # the tasks of ``sft.until_pass_rate``'s checks
        self.steps_done = 0
        self.backend = None
        self.checked_at: int | None = None
        """The step of the last check of ``sft.until_pass_rate``: a step is checked once, however the
        stage's steps are split between calls or a checkpoint."""
        self.left: dict[str, dict] = {}
        """Domains out of the stage (``sft.until_pass_rate``) since their last check at the rate:
        slug -> {"step", "pass_rate"} of the check they left at."""

    @property
    def active(self) -> list[str]:
        return [s for s in self.sampler.slugs if s not in self.left]

    @property
    def finished(self) -> bool:
        """Every domain left the stage before its ``steps`` ran out."""
        return bool(self.sampler.slugs) and not self.active

    def check_tasks(self, slug: str) -> list[Task]:
        """Training tasks of a domain (never held-out ones) for a check of ``sft.until_pass_rate``."""
        return [self.sampler.sample_task(slug, self.check_rng) for _ in range(self.config.sft.check_tasks)]

    def leave(self, slug: str, pass_rate: float) -> None:
        if slug not in self.left:
            self.left[slug] = {"step": self.steps_done, "pass_rate": round(pass_rate, 4)}

    def rejoin(self, slug: str) -> None:
        self.left.pop(slug, None)

    def train(self, steps: int, callback: Callable[[int, float], None] | None = None) -> list[float]:
        """``steps`` optimizer steps; returns their losses (``callback(steps_done, loss)`` after each)."""
        cfg = self.config.sft
        if self.backend is None:
            self.backend = self._make_backend()
        losses = []
        slugs = self.active
        weights = [w for s, w in zip(self.sampler.slugs, self.sampler.weights) if s not in self.left]
        if not slugs or not any(w > 0 for w in weights):
            return losses
        for _ in range(steps):
            tasks = [self.sampler.sample_task(s, self.rng)
                     for s in self.rng.choices(slugs, weights, k=cfg.batch_size)]
            loss = sft_step(self.model, self.backend, self.tokenizer, tasks, self.device,
                            micro_batch_size=self.config.optimizer.micro_batch_size,
                            max_prompt_tokens=self.config.tokenizer.max_prompt_tokens,
                            max_new_tokens=self.config.rollout.max_new_tokens)
            self.steps_done += 1
            losses.append(loss)
            if callback:
                callback(self.steps_done, loss)
        return losses

    def state_dict(self) -> dict:
        return {"steps_done": self.steps_done, "rng": self.rng.getstate(), "check_rng": self.check_rng.getstate(),
                "left": dict(self.left), "checked_at": self.checked_at, "optimizer": self.backend.state_dict() if self.backend is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.steps_done = state["steps_done"]
        self.rng.setstate(state["rng"])
        if state.get("check_rng") is not None:  # checkpoints from before sft.until_pass_rate have neither
            self.check_rng.setstate(state["check_rng"])
        self.left = dict(state.get("left") or {})
        self.checked_at = state.get("checked_at")
        if state["optimizer"] is not None:
            self.backend = self._make_backend()
            self.backend.load_state_dict(state["optimizer"])

    def _make_backend(self):
        return make_backend(self.model, replace(self.config.optimizer, warmup_steps=0, lr_schedule="constant"),
                            lr=self.config.sft.lr)
