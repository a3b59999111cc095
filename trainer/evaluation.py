"""Evaluation of a policy on held-out tasks: pass@k, mean reward, outcomes, tokens and seconds.

One :class:`EvalSpec` names a domain, its layer (``capability``: held-out single-domain task
sets; ``end_to_end``: multi-step environments and code such as HumanEval), how many held-out
tasks (picked by a fixed seed, :mod:`trainer.holdout`), samples per task and decoding. The same
rollout engines as training generate (torch or vLLM); with greedy decoding (temperature 0) the
result is the same every time.

    engine, tokenizer = load_for_eval("var/registry/12/model", engine="torch")
    results = evaluate(engine, tokenizer, [EvalSpec("builtin-addition", tasks=32)])
    results[0].summary()["pass_at"]["1"]

The run driver evaluates the live policy every ``eval.every_steps`` steps with
:func:`evaluate_job` (the engine's RNG is saved and restored, so training is not disturbed).
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from trainer import catalogue
from trainer.config import ModelConfig, TokenizerConfig
from trainer.episodes import multi_turn, single_turn
from trainer.holdout import HOLDOUT_FRACTION, heldout_tasks
from trainer.outcomes import Outcome, Verification
from trainer.rollout import make_engine
from trainer.rollout.base import SamplingParams
from trainer.tasks.base import Task

LAYERS = ("capability", "end_to_end")
VerifyBatch = Callable[[list[tuple[str, Task]]], list[Verification]]


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate on one domain."""

    domain: str
    """Domain slug."""
    layer: str = "capability"
    """``capability`` (held-out task sets) or ``end_to_end`` (multi-step environments, code)."""
    tasks: int = 16
    """Held-out tasks to evaluate (fewer when the domain has fewer held-out tasks)."""
    seed: int = 1234
    """Picks the held-out tasks and seeds sampling."""
    samples: int = 1
    """Completions per task (pass@k needs k of them)."""
    temperature: float = 0.0
    """0 is greedy decoding (deterministic)."""
    max_new_tokens: int = 32
    """Tokens per model turn."""
    max_turns: int = 4
    """Model turns per episode in multi-step environments."""
    max_episode_tokens: int = 512
    """Token budget of a multi-step episode after the prompt."""
    level: int = 0
    """Difficulty level the tasks are drawn at."""
    levels: tuple[int, ...] = ()
    """When set, instead of ``level``: the held-out tasks of each of these levels, pooled (an even
    share of ``tasks`` each; a level with fewer held-out tasks gives what it has). For a domain
    whose short instances have almost no held-out tasks (bit-string parity holds 0, 1, 2, 2 and 5
    at 2 to 6 bits), one level is a handful of tasks whose labels need not be balanced."""
    k: tuple[int, ...] = (1,)
    """pass@k reported for each k not above ``samples``."""
    holdout_fraction: float = HOLDOUT_FRACTION
    """The held-out share the tasks come from."""

    @classmethod
    def from_item(cls, item: dict) -> "EvalSpec":
        """The spec of one evaluation-suite item (a registry suite's ``items`` entry, every field
        present: the registry fills its defaults in).

        >>> EvalSpec.from_item({"domain": "parity", "layer": "capability", "tasks": 8, "seed": 1,
        ...     "samples": 2, "temperature": 0, "max_new_tokens": 8, "max_turns": 1,
        ...     "max_episode_tokens": 64, "level": 3, "k": [1, 2]}).k
        (1, 2)
        """
        return cls(domain=item["domain"], layer=item["layer"], tasks=item["tasks"], seed=item["seed"],
                   samples=item["samples"], temperature=float(item["temperature"]),
                   max_new_tokens=item["max_new_tokens"], max_turns=item["max_turns"],
                   max_episode_tokens=item["max_episode_tokens"], level=item["level"],
                   levels=tuple(item.get("levels") or ()), k=tuple(item["k"]))  # suites saved before levels lack it


def spec_tasks(source, spec: EvalSpec) -> list:
    """The held-out tasks a spec evaluates: ``tasks`` of them at ``level``, or pooled over ``levels``.

    >>> from trainer.catalogue.builtin import PARITY
    >>> pooled = spec_tasks(PARITY, EvalSpec(domain="builtin-parity", tasks=32, levels=(1, 2, 3, 4)))
    >>> sorted(len(t.id) for t in pooled), sorted(t.answer for t in pooled).count("1")
    ([3, 4, 4, 5, 5, 6, 6, 6, 6, 6], 5)
    >>> from trainer.catalogue.builtin import ADDITION  # one level: the others repeat it, and count once
    >>> again = spec_tasks(ADDITION, EvalSpec(domain="builtin-addition", tasks=100, levels=(0, 1, 2)))
    >>> len(again) == len({t.id for t in again}) == len(spec_tasks(ADDITION, EvalSpec(domain="builtin-addition", tasks=100)))
    True
    """
    levels = spec.levels or (spec.level,)
    share, extra = divmod(spec.tasks, len(levels))
    tasks, seen = [], set()
    for i, level in enumerate(levels):
        # a level past the domain's last (or of a domain with one level) draws the same tasks again
        for task in heldout_tasks(source, spec.domain, share + (i < extra), seed=spec.seed, level=level,
                                  fraction=spec.holdout_fraction):
            if str(task.id) not in seen:
                seen.add(str(task.id))
                tasks.append(task)
    return tasks


@dataclass
class TaskResult:
    """Every sample of one task."""

    task_id: str
    rewards: list[float | None]
    """Reward per sample; None for infrastructure outcomes (masked)."""
    outcomes: list[str]
    tokens: int
    """Model tokens generated over all samples."""
    seconds: float
    """This task's share of generation and verification time."""
    completion: str = ""
    """The first sample's completion (for reading)."""

    @property
    def passes(self) -> int:
        return sum(o == Outcome.PASS.value for o in self.outcomes)

    @property
    def valid(self) -> int:
        return sum(r is not None for r in self.rewards)

    @property
    def mean_reward(self) -> float | None:
        valid = [r for r in self.rewards if r is not None]
        return sum(valid) / len(valid) if valid else None

    def as_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "rewards": self.rewards, "outcomes": self.outcomes,
                "tokens": self.tokens, "seconds": round(self.seconds, 6), "completion": self.completion}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` passes (Chen et al., 2021).

    >>> pass_at_k(1, 1, 1), pass_at_k(4, 0, 2), round(pass_at_k(4, 1, 2), 4)
    (1.0, 0.0, 0.5)
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class DomainResult:
    """One spec's results over its held-out tasks."""

    spec: EvalSpec
    tasks: list[TaskResult] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """pass@k, mean reward (mean over tasks of each task's mean), outcome counts, costs."""
        scored = [t for t in self.tasks if t.mean_reward is not None]
        pass_at = {}
        for k in self.spec.k:
            eligible = [t for t in self.tasks if t.valid >= k]
            if eligible:
                pass_at[str(k)] = sum(pass_at_k(t.valid, t.passes, k) for t in eligible) / len(eligible)
        outcomes = Counter(o for t in self.tasks for o in t.outcomes)
        n = max(len(self.tasks), 1)
        return {"tasks": len(self.tasks), "samples": sum(len(t.outcomes) for t in self.tasks),
                "pass_at": pass_at,
                "mean_reward": sum(t.mean_reward for t in scored) / len(scored) if scored else None,
                "outcomes": dict(sorted(outcomes.items())),
                "tokens_per_task": sum(t.tokens for t in self.tasks) / n,
                "seconds_per_task": sum(t.seconds for t in self.tasks) / n}


def reseed(engine, seed: int) -> None:
    """Put an engine's sampling RNG at ``seed`` (callers save and restore its state)."""
    if hasattr(engine, "generator"):
        engine.generator.manual_seed(seed)
    if hasattr(engine, "calls"):
        engine.seed, engine.calls = seed, 0


def evaluate(engine, tokenizer, specs: Sequence[EvalSpec], *, domains: dict | None = None,
             verify_batch: VerifyBatch | None = None, max_prompt_tokens: int = 512) -> list[DomainResult]:
    """Evaluate each spec with ``engine``; ``domains`` maps slugs to DomainSpecs (the catalogue by
    default), ``verify_batch`` defaults to each domain's own verifier, inline."""
    # lazy: trainer.job imports torch and transformers (seconds); every worker imports this
    # module at start (workers.evaluate), most of them never evaluate.
    from trainer.job import verify_inline

    domains = domains if domains is not None else catalogue.all_domains()
    verify_batch = verify_batch or verify_inline(domains)
    results = []
    for spec in specs:
        domain = domains[spec.domain]
        tasks = spec_tasks(domain.source, spec)
        reseed(engine, spec.seed)
        params = SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature)
        requests = [(task, spec.samples, i) for i, task in enumerate(tasks)]
        t0 = time.perf_counter()
        if domain.environment is None:
            trajs = single_turn(engine, tokenizer, requests, params, max_prompt_tokens=max_prompt_tokens)
        else:
            trajs = multi_turn(engine, tokenizer, requests, params, domain.environment,
                               max_turns=spec.max_turns, max_episode_tokens=spec.max_episode_tokens,
                               max_prompt_tokens=max_prompt_tokens)
        todo = [t for t in trajs if t.verification is None]
        if todo:
            for t, v in zip(todo, verify_batch([(t.completion, t.task) for t in todo])):
                t.verification = v
        seconds = (time.perf_counter() - t0) / max(len(tasks), 1)
        result = DomainResult(spec)
        for i, task in enumerate(tasks):
            mine = [t for t in trajs if t.group == i]
            result.tasks.append(TaskResult(
                task_id=str(task.id), rewards=[t.verification.reward for t in mine],
                outcomes=[t.verification.outcome.value for t in mine],
                tokens=sum(sum(t.loss_mask) for t in mine), seconds=seconds,
                completion=mine[0].completion if mine else ""))
        results.append(result)
    return results


def load_for_eval(path: str, *, engine: str = "torch", device: str = "auto", seed: int = 0,
                  max_model_len: int = 1024, gpu_memory_utilization: float = 0.2):
    """A rollout engine and tokenizer for the model saved in ``path`` (no optimizer, eval mode)."""
    from trainer.models.load import load_model, load_tokenizer, resolve_device  # lazy: torch and transformers, as above

    model_cfg = ModelConfig(path=path, device=device)
    tokenizer = load_tokenizer(model_cfg, TokenizerConfig())
    model = load_model(path, model_cfg, resolve_device(device), trainable=False)
    return make_engine(engine, model, tokenizer, seed=seed, share_weights=True,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len), tokenizer


def run_specs(job) -> list[EvalSpec]:
    """The held-out evaluation a job runs every ``eval.every_steps``: greedy, on its domains."""
    cfg = job.config
    fraction = cfg.sampler.holdout_fraction or HOLDOUT_FRACTION
    return [EvalSpec(domain=slug, layer="end_to_end" if job.domains[slug].environment else "capability",
                     tasks=cfg.eval.tasks_per_domain, seed=cfg.eval.seed,
                     max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                     max_turns=cfg.rollout.max_turns, max_episode_tokens=cfg.rollout.max_episode_tokens,
                     holdout_fraction=min(fraction, HOLDOUT_FRACTION))
            for slug in job.domains]


def evaluate_job(job, specs: Sequence[EvalSpec] | None = None) -> tuple[dict[str, float], list[DomainResult]]:
    """Evaluate a training job's current policy; returns ``eval/...`` metrics and the results.

    The engine's RNG state is restored afterwards, so a run with periodic evaluation trains on
    exactly the batches it would have trained on without it.
    """
    specs = list(specs) if specs is not None else run_specs(job)

    def run() -> list[DomainResult]:
        saved = job.engine.state_dict()  # after the batches generated ahead, which advance the RNG
        try:
            return evaluate(job.engine, job.tokenizer, specs, domains=job.domains, verify_batch=job.verify_batch,
                            max_prompt_tokens=job.config.tokenizer.max_prompt_tokens)
        finally:
            job.engine.load_state_dict(saved)

    results = job.pipeline.on_engine(run)  # where the engine runs, after what is queued, current weights
    return eval_metrics(results), results


def eval_metrics(results: Sequence[DomainResult]) -> dict[str, float]:
    """``eval/reward/<domain>``, ``eval/pass@1/<domain>``, ``eval/tokens_per_task/<domain>`` and
    ``eval/reward/mean`` (metric names the run page plots beside ``reward/<domain>``)."""
    return summary_metrics([(r.spec.domain, r.summary()) for r in results])


def summary_metrics(summaries: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, float]:
    """:func:`eval_metrics` from ``(domain, DomainResult.summary())`` pairs (or the registry's
    stored results, which keep the same fields)."""
    out: dict[str, float] = {}
    means = []
    for domain, s in summaries:
        if s["mean_reward"] is not None:
            out[f"eval/reward/{domain}"] = s["mean_reward"]
            means.append(s["mean_reward"])
        for k, v in s["pass_at"].items():
            out[f"eval/pass@{k}/{domain}"] = v
        out[f"eval/tokens_per_task/{domain}"] = s["tokens_per_task"]
        out[f"eval/seconds_per_task/{domain}"] = s["seconds_per_task"]
    if means:
        out["eval/reward/mean"] = sum(means) / len(means)
    return out
