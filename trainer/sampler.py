"""Which tasks a step trains on, and how many samples each gets.

- Domain mix: each task's domain is drawn by the configured weights.
- Difficulty: a running pass rate per task. With ``adaptive_budget`` a task's number of samples
  is ``min + (max - min) * 4 p (1 - p)`` (rounded): most where the outcome is uncertain
  (p near 0.5, or unseen), fewest for solved (p = 1) or hopeless (p = 0) tasks.
- Curriculum: a domain moves up a level when its running pass rate passes the threshold; a share
  (``curriculum_review``) of its draws stays at the levels it has passed, so they are not forgotten.
- Held-out tasks (``holdout_fraction``, :mod:`trainer.holdout`) are never drawn: evaluation uses them.

All randomness comes from one ``random.Random``; :meth:`state_dict` captures it with the
estimates, so a resumed job draws exactly the tasks an uninterrupted one would have.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from trainer.config import SamplerConfig
from trainer.holdout import is_heldout
from trainer.tasks.base import Task, TaskSource

MAX_TRACKED_TASKS = 100_000
MAX_HOLDOUT_REDRAWS = 64
"""Draws tried to find a task outside the held-out share (a domain that is all held out keeps the last)."""


@dataclass
class Estimate:
    """Running pass rate of one task or domain level."""

    pass_rate: float
    """Exponentially weighted pass rate."""
    count: int
    """Samples seen."""


def sample_budget(pass_rate: float | None, lo: int, hi: int) -> int:
    """Samples for a task with this running pass rate (None: never seen).

    >>> sample_budget(None, 2, 16), sample_budget(0.5, 2, 16), sample_budget(1.0, 2, 16), sample_budget(0.9, 2, 16)
    (16, 16, 2, 7)
    """
    if pass_rate is None:
        return hi
    return int(round(lo + (hi - lo) * 4 * pass_rate * (1 - pass_rate)))


class TaskSampler:
    """Draws ``(task, n_samples)`` pairs by domain weight, difficulty and curriculum level."""

    def __init__(self, sources: dict[str, TaskSource], weights: dict[str, float],
                 cfg: SamplerConfig, *, n: int, seed: int):
        self.sources = sources
        self.slugs = list(weights)
        total = sum(weights.values())
        self.weights = [weights[s] / total for s in self.slugs]
        self.cfg = cfg
        self.n = n
        self.rng = random.Random(seed)
        self.tasks: dict[str, Estimate] = {}
        self.levels: dict[str, int] = {s: 0 for s in self.slugs}
        self.level_stats: dict[str, Estimate] = {s: Estimate(0.0, 0) for s in self.slugs}

    def set_weights(self, weights: dict[str, float]) -> None:
        """Change the domain mix (applied from the next draw); unknown slugs are an error."""
        unknown = sorted(set(weights) - set(self.slugs))
        if unknown:
            raise KeyError(f"not domains of this sampler: {', '.join(unknown)}")
        merged = {s: weights.get(s, w) for s, w in zip(self.slugs, self.weights)}
        total = sum(merged.values())
        self.weights = [merged[s] / total for s in self.slugs]

    def draw(self, k: int) -> list[tuple[Task, int]]:
        """``k`` tasks with their sample counts."""
        out = []
        for _ in range(k):
            slug = self.rng.choices(self.slugs, self.weights)[0]
            task = self.sample_task(slug, self.rng)
            out.append((task, self.budget(task)))
        return out

    def sample_task(self, slug: str, rng: random.Random) -> Task:
        """One task of ``slug`` at its current level (or, for the curriculum's review share, a
        level below it), never a held-out one (SFT draws through this too)."""
        level = self.levels[slug]
        if self.cfg.curriculum and level > 0 and self.cfg.curriculum_review > 0 and rng.random() < self.cfg.curriculum_review:
            level = rng.randrange(level)
        task = self.sources[slug].sample(rng, level)
        for _ in range(MAX_HOLDOUT_REDRAWS if self.cfg.holdout_fraction > 0 else 0):
            if not is_heldout(task, self.cfg.holdout_fraction):
                break
            task = self.sources[slug].sample(rng, level)
        return task

    def budget(self, task: Task) -> int:
        if not self.cfg.adaptive_budget:
            return self.n
        est = self.tasks.get(self._key(task))
        return sample_budget(est.pass_rate if est else None, self.cfg.min_samples,
                             self.cfg.max_samples)

    def update(self, task: Task, passes: list[bool]) -> None:
        """Fold a group's valid outcomes (True = pass) into the task and domain estimates."""
        if not passes:
            return
        rate = sum(passes) / len(passes)
        key = self._key(task)
        est = self.tasks.pop(key, None)
        decay = self.cfg.pass_rate_decay
        est = Estimate(rate, len(passes)) if est is None else Estimate(
            decay * est.pass_rate + (1 - decay) * rate, est.count + len(passes))
        self.tasks[key] = est  # re-inserted last: the dict is oldest-first
        if len(self.tasks) > MAX_TRACKED_TASKS:
            self.tasks.pop(next(iter(self.tasks)))
        self._update_level(task, rate, len(passes))

    def _update_level(self, task: Task, rate: float, count: int) -> None:
        slug = task.domain
        if slug not in self.level_stats or task.level != self.levels[slug]:
            return
        st = self.level_stats[slug]
        decay = self.cfg.pass_rate_decay
        st = Estimate(rate if st.count == 0 else decay * st.pass_rate + (1 - decay) * rate,
                      st.count + count)
        self.level_stats[slug] = st
        top = getattr(self.sources[slug], "levels", 1) - 1
        if (self.cfg.curriculum and self.levels[slug] < top
                and st.count >= self.cfg.curriculum_min_samples
                and st.pass_rate >= self.cfg.curriculum_threshold):
            self.levels[slug] += 1
            self.level_stats[slug] = Estimate(0.0, 0)

    def pass_rate(self, task: Task) -> float | None:
        est = self.tasks.get(self._key(task))
        return est.pass_rate if est else None

    @staticmethod
    def _key(task: Task) -> str:
        return f"{task.domain}/{task.level}/{task.id}"

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-safe state: RNG, per-task estimates, levels."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "weights": dict(zip(self.slugs, self.weights)),
                "tasks": {k: [e.pass_rate, e.count] for k, e in self.tasks.items()},
                "levels": dict(self.levels),
                "level_stats": {k: [e.pass_rate, e.count] for k, e in self.level_stats.items()}}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.tasks = {k: Estimate(*v) for k, v in state["tasks"].items()}
        if "weights" in state:
            self.set_weights({s: w for s, w in state["weights"].items() if s in self.slugs})
        self.levels.update(state["levels"])
        self.level_stats.update({k: Estimate(*v) for k, v in state["level_stats"].items()})
