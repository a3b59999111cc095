"""A post-training job, one step at a time: generate -> verify -> advantages -> update -> sync.

    job = Job(load_config("run.yaml"), callbacks=[print_metrics])
    while job.step_count < job.config.limits.max_steps:
        metrics = job.step()
    job.save_checkpoint("ckpt/step-100")
    job = Job.resume("ckpt/step-100")

``verify_batch(list[(completion, Task)]) -> list[Verification]`` may be injected (the run driver
fans verification out to worker queues); by default each domain's ``verify`` runs inline.
Callbacks get ``(step, metrics, samples)``; ``samples`` are plain dicts of sampled trajectories.

With ``rollout.staleness = s > 0`` the next ``s`` batches are generated and verified in the
background while the current one trains (see :mod:`trainer.pipeline`); with ``s = 0`` each step
generates, verifies and updates in turn.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import random
import shutil
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from trainer import registry
from trainer.algorithms import (clipped_policy_loss, group_advantages, token_entropy,
                                token_logprobs, zero_variance_groups)
from trainer.config import ConfigError, TrainerConfig, load_config
from trainer.episodes import Trajectory, multi_turn, single_turn
from trainer.models.lean import LeanLlama, distinct_prompts
from trainer.models.load import load_model, load_tokenizer, resolve_device
from trainer.optim import make_backend
from trainer.outcomes import Outcome, Verification
from trainer.pipeline import Batch, StageClock, engine_chunks
from trainer.rollout import make_engine
from trainer.rollout.base import SamplingParams
from trainer.sampler import TaskSampler
from trainer.sft import sft_step
from trainer.tasks.base import Task

Callback = Callable[[int, dict, list], None]
VerifyBatch = Callable[[list[tuple[str, Task]]], list[Verification]]


# ----------------------------------------------------------------------------- verification
def verify_inline(domains: dict[str, registry.DomainSpec]) -> VerifyBatch:
    """Default verifier fan-out: each domain's ``verify`` in this process.

    A verifier that raises is an infrastructure failure (judge_error, masked), not a reward of 0.
    """
    def verify_batch(items: list[tuple[str, Task]]) -> list[Verification]:
        out = []
        for completion, task in items:
            try:
                out.append(domains[task.domain].verify(completion, task))
            except Exception as exc:  # noqa: BLE001 - any verifier crash is masked and counted
                out.append(Verification(Outcome.JUDGE_ERROR, 0.0, {"error": repr(exc)}))
        return out
    return verify_batch


# ----------------------------------------------------------------------------- batching
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


# ----------------------------------------------------------------------------- the job
class Job:
    """One post-training run, driven step by step (by the CLI or the Celery run driver)."""

    def __init__(self, config: TrainerConfig | dict | str, callbacks: Sequence[Callback] = (),
                 verify_batch: VerifyBatch | None = None, *, samples_per_step: int = 16,
                 weights_path: str | None = None):
        self.config = cfg = load_config(config)
        if not cfg.model.path:
            raise ConfigError([("model.path", "is required")])
        self.callbacks = list(callbacks)
        self.samples_per_step = samples_per_step
        self.domains = self._resolve_domains(cfg)
        self.verify_batch = verify_batch or verify_inline(self.domains)
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.model.device)
        self.tokenizer = load_tokenizer(cfg.model, cfg.tokenizer)
        self.model = load_model(weights_path or cfg.model.path, cfg.model, self.device)
        self.reference = None
        if cfg.algorithm.kl_coef > 0:
            self.reference = load_model(cfg.model.reference_path or cfg.model.path, cfg.model,
                                        self.device, trainable=False)
        alg = cfg.algorithm
        self.backend = make_backend(self.model, cfg.optimizer,
                                    total_steps=cfg.limits.max_steps * alg.updates_per_batch)
        self.model = self.backend.model
        # The lean forward (Llama-family models under the plain torch backend) scores each
        # distinct prompt once per micro-batch; the reference must take the same path.
        self.lean = LeanLlama.wrap(self.model) if cfg.model.lean_forward else None
        self.reference_lean = None
        if self.lean is not None and self.reference is not None:
            self.reference_lean = LeanLlama.wrap(self.reference)
            if self.reference_lean is None:
                self.lean = None
        self.sampler = TaskSampler({s: d.source for s, d in self.domains.items()}, cfg.domains,
                                   cfg.sampler, n=cfg.rollout.n, seed=cfg.seed)
        self.sft_rng = random.Random(cfg.seed + 1)
        asynchronous = cfg.rollout.staleness > 0
        self.engine = make_engine(cfg.rollout.engine, self.model, self.tokenizer, seed=cfg.seed,
                                  batch_size=cfg.rollout.batch_size, share_weights=not asynchronous,
                                  lean_forward=cfg.model.lean_forward,
                                  gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
                                  max_model_len=cfg.tokenizer.max_prompt_tokens
                                  + cfg.rollout.max_episode_tokens)
        self.params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
        self.step_count = 0
        self.sft_steps_done = 0
        # Overlap: one thread generates (and applies weight syncs in order), one verifies.
        self.rollout_thread = cf.ThreadPoolExecutor(1, "rollout") if asynchronous else None
        self.verify_thread = cf.ThreadPoolExecutor(1, "verify") if asynchronous else None
        self.pending: list[cf.Future] = []
        """Batches queued ahead (futures of :class:`Batch`), oldest first: at most ``staleness``."""
        self.engine_version = 0
        """Policy updates reflected in the rollout engine's weights (rollout thread's view)."""
        self.clocks = {stage: StageClock() for stage in ("generate", "verify", "update")}
        self._window_start: float | None = None
        self._busy_at_window_start: dict[str, float] = {}
        self.last_generated: list[Trajectory] = []
        """Every trajectory the last step generated and verified (refills and dropped groups too)."""

    @staticmethod
    def _resolve_domains(cfg: TrainerConfig) -> dict[str, registry.DomainSpec]:
        known = registry.all_domains()
        missing = [(f"domains.{s}", "unknown domain") for s in cfg.domains if s not in known]
        if missing:
            raise ConfigError(missing)
        return {s: known[s] for s in cfg.domains}

    # -- generation ------------------------------------------------------------------------
    def _generate(self, requests: list[tuple[Task, int, int]]) -> list[Trajectory]:
        """Trajectories for ``(task, n, group)`` requests; multi-turn domains run their env."""
        with self.clocks["generate"].running():
            return self._generate_untimed(requests)

    def _generate_untimed(self, requests: list[tuple[Task, int, int]]) -> list[Trajectory]:
        cfg = self.config
        single = [r for r in requests if self.domains[r[0].domain].environment is None]
        multi = [r for r in requests if self.domains[r[0].domain].environment is not None]
        trajs: list[Trajectory] = []
        if single:
            trajs += single_turn(self.engine, self.tokenizer, single, self.params,
                                 max_prompt_tokens=cfg.tokenizer.max_prompt_tokens,
                                 use_chat_template=cfg.tokenizer.use_chat_template)
        for slug in dict.fromkeys(r[0].domain for r in multi):
            mine = [r for r in multi if r[0].domain == slug]
            trajs += multi_turn(self.engine, self.tokenizer, mine, self.params,
                                self.domains[slug].environment, max_turns=cfg.rollout.max_turns,
                                max_episode_tokens=cfg.rollout.max_episode_tokens,
                                max_prompt_tokens=cfg.tokenizer.max_prompt_tokens)
        return trajs

    def _draw_requests(self, k: int, first_group: int = 0) -> list[tuple[Task, int, int]]:
        return [(task, n, first_group + i) for i, (task, n) in enumerate(self.sampler.draw(k))]

    def _produce(self, requests: list[tuple[Task, int, int]]) -> Batch:
        """On the rollout thread: generate a batch chunk by chunk, each chunk going to the verify
        thread as soon as it is generated (its verification overlaps the next chunk's generation,
        the next batch's, and the caller's update)."""
        batch = Batch([], policy_version=self.engine_version)
        for chunk in engine_chunks(requests, self.config.rollout.batch_size):
            trajs = self._generate(chunk)
            batch.trajs += trajs
            batch.checks.append(self.verify_thread.submit(self._verify, trajs))
        return batch

    def _submit(self, requests: list[tuple[Task, int, int]]) -> cf.Future:
        """Queue a batch on the rollout thread (behind every sync queued before it)."""
        return self.rollout_thread.submit(self._produce, requests)

    @staticmethod
    def _ready(future: cf.Future, metrics: dict | None = None) -> Batch:
        """Wait for a queued batch to be generated, then verified; time each wait."""
        t0 = time.perf_counter()
        batch = future.result()
        t1 = time.perf_counter()
        for check in batch.checks:
            check.result()
        batch.checks = []
        if metrics is not None:
            metrics["stage/generate_s"] += t1 - t0
            metrics["stage/verify_s"] += time.perf_counter() - t1
        return batch

    def _in_turn(self, requests: list[tuple[Task, int, int]], metrics: dict) -> Batch:
        """Synchronous: generate the whole batch with the current weights, then verify it."""
        t0 = time.perf_counter()
        batch = Batch(self._generate(requests), policy_version=self.step_count)
        t1 = time.perf_counter()
        self._verify(batch.trajs)
        metrics["stage/generate_s"] += t1 - t0
        metrics["stage/verify_s"] += time.perf_counter() - t1
        return batch

    def _next_batch(self, metrics: dict) -> Batch:
        """This step's verified batch: produced now (synchronous) or taken from the pipeline,
        after queueing the batches that may be generated ahead (``staleness`` of them)."""
        k = self.config.rollout.prompts_per_step
        if self.rollout_thread is None:
            return self._in_turn(self._draw_requests(k), metrics)
        while len(self.pending) < self.config.rollout.staleness + 1:
            self.pending.append(self._submit(self._draw_requests(k)))
        return self._ready(self.pending.pop(0), metrics)

    def _refill(self, k: int, first_group: int, metrics: dict) -> Batch:
        requests = self._draw_requests(k, first_group)
        if self.rollout_thread is None:
            return self._in_turn(requests, metrics)
        return self._ready(self._submit(requests), metrics)

    # -- verification ----------------------------------------------------------------------
    def _verify(self, trajs: list[Trajectory]) -> None:
        todo = [t for t in trajs if t.verification is None]
        if todo:
            with self.clocks["verify"].running():
                results = self.verify_batch([(t.completion, t.task) for t in todo])
            for t, v in zip(todo, results):
                t.verification = v

    def _collect(self, metrics: dict) -> list[Trajectory]:
        """A verified batch; with dynamic sampling, flat groups are dropped and refilled."""
        alg, k = self.config.algorithm, self.config.rollout.prompts_per_step
        metrics["stage/generate_s"] = metrics["stage/verify_s"] = 0.0
        batch = self._next_batch(metrics)
        self._check_staleness(batch, metrics)
        trajs = batch.trajs
        self._update_sampler(trajs)
        metrics["batch/groups_generated"] = len({t.group for t in trajs})
        self.last_generated = list(trajs)
        if not alg.dynamic_sampling:
            return trajs
        kept, refills, dropped = self._drop_flat(trajs), 0, 0
        dropped += len({t.group for t in trajs}) - len({t.group for t in kept})
        while len({t.group for t in kept}) < k and refills < alg.max_refills:
            refills += 1
            more = self._refill(k - len({t.group for t in kept}), refills * k * 2, metrics)
            self._check_staleness(more, metrics)
            self._update_sampler(more.trajs)
            self.last_generated += more.trajs
            good = self._drop_flat(more.trajs)
            dropped += len({t.group for t in more.trajs}) - len({t.group for t in good})
            kept += good
        keep_groups = list(dict.fromkeys(t.group for t in kept))[:k]
        metrics["batch/refills"] = refills
        metrics["batch/dropped_groups"] = dropped
        return [t for t in kept if t.group in set(keep_groups)]

    def _check_staleness(self, batch: Batch, metrics: dict) -> None:
        """Record the policy version a batch was generated with; refuse one older than allowed."""
        lag = self.step_count - batch.policy_version
        if not 0 <= lag <= self.config.rollout.staleness:
            raise RuntimeError(f"batch generated by policy version {batch.policy_version} reached "
                               f"update {self.step_count + 1}: staleness {lag} is outside "
                               f"0..{self.config.rollout.staleness}")
        if "batch/policy_version" not in metrics:  # the step's first batch is its oldest
            metrics["batch/policy_version"] = float(batch.policy_version)
            metrics["batch/policy_lag"] = float(lag)

    @staticmethod
    def _drop_flat(trajs: list[Trajectory]) -> list[Trajectory]:
        rewards, groups, valid = rewards_of(trajs)
        flat = zero_variance_groups(rewards, groups, valid)
        return [t for t in trajs if t.group not in flat]

    def _update_sampler(self, trajs: list[Trajectory]) -> None:
        by_group: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            by_group[t.group].append(t)
        for group in by_group.values():
            passes = [t.verification.outcome is Outcome.PASS for t in group
                      if not t.verification.is_infrastructure]
            self.sampler.update(group[0].task, passes)

    # -- update ----------------------------------------------------------------------------
    def _update(self, trajs: list[Trajectory], adv: torch.Tensor, metrics: dict) -> None:
        """Gradient steps on the valid trajectories, micro-batched with accumulation."""
        cfg, alg = self.config, self.config.algorithm
        valid_idx = [i for i, t in enumerate(trajs) if not t.verification.is_infrastructure]
        totals = defaultdict(float)
        if not valid_idx or (alg.kl_coef == 0 and not any(adv[i] != 0 for i in valid_idx)):
            # no learning signal at all: report entropy, take no optimizer step
            metrics.update(self._inspect(self.last_generated))
            metrics["batch/skipped_update"] = 1.0
            return
        minibatches = [valid_idx[i::alg.updates_per_batch] for i in range(alg.updates_per_batch)]
        for u, idx in enumerate(m for m in minibatches if m):
            if alg.loss_aggregation == "token":
                normalizer = float(sum(sum(trajs[i].loss_mask) for i in idx)) or 1.0
            else:
                normalizer = float(len(idx))
            for micro in chunks(idx, cfg.optimizer.micro_batch_size):
                batch = score(self.model, self.lean, [trajs[i] for i in micro],
                              self.tokenizer.pad_token_id, self.device,
                              self.reference, self.reference_lean)
                logits = batch["logits"]  # (B, T, V)
                logp = token_logprobs(logits, batch["targets"], cfg.rollout.temperature)  # (B, T)
                ref_logp = None
                if self.reference is not None:
                    ref_logp = token_logprobs(batch["ref_logits"], batch["targets"], cfg.rollout.temperature)
                loss, stats = clipped_policy_loss(
                    logp, batch["old_logp"], adv[micro].to(self.device), batch["loss_mask"],
                    clip_low=alg.clip_low, clip_high=alg.clip_high,
                    aggregation=alg.loss_aggregation, normalizer=normalizer,
                    ref_logp=ref_logp, kl_coef=alg.kl_coef)
                self.backend.backward(loss)
                with torch.no_grad():
                    m = batch["loss_mask"]
                    totals["loss"] += float(loss.detach())
                    totals["tokens"] += stats.tokens
                    totals["clipped"] += stats.clipped_tokens
                    totals["kl"] += stats.kl_sum
                    totals["entropy"] += float((token_entropy(logits.detach(), cfg.rollout.temperature) * m).sum())
                    if u == 0:  # before any update of this batch: engine vs trainer logprobs
                        delta = (logp.detach() - batch["old_logp"]) * m  # (B, T)
                        totals["mm_abs"] += float(delta.abs().sum())
                        totals["mm_kl"] += float(((torch.exp(delta) - 1 - delta) * m).sum())
                        totals["mm_tokens"] += float(m.sum())
            totals["grad_norm"] += self.backend.step()
        n_updates = sum(1 for m in minibatches if m)
        tok = max(totals["tokens"], 1.0)
        metrics.update({
            "loss/policy": totals["loss"] / n_updates,
            "policy/entropy": totals["entropy"] / tok,
            "policy/clip_frac": totals["clipped"] / tok,
            "policy/kl": totals["kl"] / tok,
            "policy/grad_norm": totals["grad_norm"] / n_updates,
            "mismatch/logprob_abs": totals["mm_abs"] / max(totals["mm_tokens"], 1.0),
            "mismatch/kl": totals["mm_kl"] / max(totals["mm_tokens"], 1.0),
            "perf/train_tokens": float(sum(len(trajs[i].prompt_ids) + len(trajs[i].response_ids)
                                           for i in valid_idx)),
        })

    @torch.no_grad()
    def _inspect(self, trajs: list[Trajectory]) -> dict[str, float]:
        """Entropy and engine/trainer logprob mismatch over the model tokens of ``trajs``."""
        sums = defaultdict(float)
        for micro in chunks(list(trajs), self.config.optimizer.micro_batch_size):
            batch = score(self.model, self.lean, micro, self.tokenizer.pad_token_id, self.device)
            logits = batch["logits"]  # (B, T, V)
            m = batch["loss_mask"]
            logp = token_logprobs(logits, batch["targets"], self.config.rollout.temperature)
            delta = (logp - batch["old_logp"]) * m  # (B, T-1)
            sums["entropy"] += float((token_entropy(logits, self.config.rollout.temperature) * m).sum())
            sums["abs"] += float(delta.abs().sum())
            sums["kl"] += float(((torch.exp(delta) - 1 - delta) * m).sum())
            sums["tokens"] += float(m.sum())
        tok = max(sums["tokens"], 1.0)
        return {"policy/entropy": sums["entropy"] / tok, "mismatch/logprob_abs": sums["abs"] / tok,
                "mismatch/kl": sums["kl"] / tok}

    def _sync(self, version: int) -> float:
        """Make the rollout engine hold the policy after ``version`` updates. With overlap, a
        snapshot is synced on the rollout thread behind the generations queued before it."""
        if self.rollout_thread is None:
            seconds = self.engine.sync_weights(self.model)
            self.engine_version = version
            return seconds
        snapshot = [p.detach().clone() for p in self.model.parameters()]
        self.rollout_thread.submit(self._sync_engine, _ParamsView(snapshot), version)
        return 0.0

    def _sync_engine(self, weights, version: int) -> None:
        self.engine.sync_weights(weights)
        self.engine_version = version

    def _sync_now(self) -> None:
        """The engine takes the current weights now (after whatever is queued ahead of it)."""
        if self.rollout_thread is None:
            self._sync(self.step_count)
        else:
            self.rollout_thread.submit(self._sync_engine, self.model, self.step_count).result()

    # -- one step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """Run one RL step; returns its metrics (also passed to every callback)."""
        t_step = time.perf_counter()
        if self._window_start is None:
            self._window_start = t_step
        metrics: dict[str, float] = {}
        trajs = self._collect(metrics)
        rewards, groups, valid = rewards_of(trajs)
        alg = self.config.algorithm
        adv = group_advantages(rewards, groups, valid, estimator=alg.name, scale=alg.scale_rewards)
        with self.clocks["update"].running():
            t0 = time.perf_counter()
            self._update(trajs, adv, metrics)
            metrics["stage/update_s"] = time.perf_counter() - t0
            metrics["stage/sync_s"] = self._sync(self.step_count + 1)
        self.step_count += 1
        step_s = time.perf_counter() - t_step
        metrics["stage/step_s"] = step_s
        metrics.update(self._stage_metrics())
        metrics.update(outcome_metrics(self.last_generated))
        n_gen = len(self.last_generated)
        gen_tokens = sum(sum(t.loss_mask) for t in self.last_generated)
        metrics["perf/completions_per_s"] = n_gen / step_s
        metrics["perf/tokens_per_s"] = (gen_tokens + metrics.get("perf/train_tokens", 0.0)) / step_s
        metrics["perf/gen_tokens_per_s"] = gen_tokens / max(metrics["pipeline/generate_busy_s"], 1e-9)
        # The verify stage's rate while it works (completions verified per busy second).
        metrics["perf/verifications_per_s"] = n_gen / max(metrics["pipeline/verify_busy_s"], 1e-9)
        metrics["perf/generator_idle_frac"] = metrics["pipeline/generate_idle_frac"]
        metrics["batch/advantage_abs"] = float(adv.abs().mean()) if len(adv) else 0.0
        for slug, level in self.sampler.levels.items():
            metrics[f"sampler/level/{slug}"] = float(level)
        samples = self._samples(trajs, adv)
        for cb in self.callbacks:
            cb(self.step_count, metrics, samples)
        return metrics

    def _stage_metrics(self) -> dict[str, float]:
        """Busy seconds and idle fraction of each stage since the previous step ended.

        Windows tile the job's time from its first step on, so the time between steps (the
        caller's bookkeeping) counts too: work the pipeline does then is busy, waiting is idle.
        """
        now = time.perf_counter()
        window = max(now - self._window_start, 1e-9)
        previous = self._busy_at_window_start
        out = {"pipeline/window_s": window}
        for stage, clock in self.clocks.items():
            busy = clock.busy_s(now)
            spent = min(max(busy - previous.get(stage, 0.0), 0.0), window)
            out[f"pipeline/{stage}_busy_s"] = spent
            out[f"pipeline/{stage}_idle_frac"] = 1.0 - spent / window
            previous[stage] = busy
        self._busy_at_window_start = previous
        self._window_start = now
        return out

    def _samples(self, trajs: list[Trajectory], adv: torch.Tensor) -> list[dict]:
        """Up to ``samples_per_step`` trajectories, spread over groups, as plain dicts."""
        firsts = list({t.group: i for i, t in reversed(list(enumerate(trajs)))}.values())[::-1]
        rest = [i for i in range(len(trajs)) if i not in set(firsts)]
        out = []
        for i in (firsts + rest)[:self.samples_per_step]:
            t = trajs[i]
            v = t.verification
            out.append({"domain": t.task.domain, "task_id": t.task.id, "prompt": t.task.prompt,
                        "completion": t.completion, "reward": v.reward, "outcome": v.outcome.value,
                        "details": v.details, "advantage": float(adv[i]), "turns": t.turns,
                        "truncated": t.truncated, "tokens": len(t.response_ids)})
        return out

    # -- SFT and evaluation ----------------------------------------------------------------
    def sft(self, steps: int | None = None, callback: Callable[[int, float], None] | None = None) -> list[float]:
        """Supervised steps on reference answers (next-token loss on the answer only)."""
        cfg = self.config.sft
        steps = cfg.steps if steps is None else steps
        if not hasattr(self, "_sft_backend"):
            self._sft_backend = make_backend(
                self.model, replace(self.config.optimizer, warmup_steps=0, lr_schedule="constant"),
                lr=cfg.lr)
        losses = []
        for _ in range(steps):
            tasks = [self.sampler.sample_task(s, self.sft_rng)  # held-out tasks stay out of SFT too
                     for s in self.sft_rng.choices(self.sampler.slugs, self.sampler.weights,
                                                   k=cfg.batch_size)]
            loss = sft_step(self.model, self._sft_backend, self.tokenizer, tasks, self.device)
            self.sft_steps_done += 1
            losses.append(loss)
            if callback:
                callback(self.sft_steps_done, loss)
        self._sync_now()
        return losses

    def evaluate(self, tasks: list[Task], *, greedy: bool = True, n: int = 1) -> dict[str, float]:
        """Mean reward of ``n`` completions per task (greedy by default); engine RNG is untouched."""
        params = replace(self.params, temperature=0.0 if greedy else self.params.temperature)
        def greedy_pass() -> list[Trajectory]:
            saved = self.engine.state_dict()
            out = single_turn(self.engine, self.tokenizer, [(t, n, i) for i, t in enumerate(tasks)],
                              params, max_prompt_tokens=self.config.tokenizer.max_prompt_tokens)
            self.engine.load_state_dict(saved)
            return out

        if self.rollout_thread is None:
            trajs = greedy_pass()
            self._verify(trajs)
        else:  # the current weights, on the pipeline's own threads (after what is queued)
            self._sync_now()
            trajs = self.rollout_thread.submit(greedy_pass).result()
            self.verify_thread.submit(self._verify, trajs).result()
        rewards = [t.verification.reward for t in trajs if t.verification.reward is not None]
        return {"reward": sum(rewards) / max(len(rewards), 1),
                "exact": sum(t.verification.outcome is Outcome.PASS for t in trajs) / len(trajs)}

    # -- whole run -------------------------------------------------------------------------
    def run(self, progress: bool = True) -> dict[str, float]:
        """SFT stage (once), then RL steps until ``limits``; checkpoints as configured."""
        from tqdm.auto import tqdm

        cfg = self.config
        if self.sft_steps_done < cfg.sft.steps and self.step_count == 0:
            bar = tqdm(total=cfg.sft.steps, desc="sft", disable=not progress)
            self.sft(cfg.sft.steps - self.sft_steps_done,
                     callback=lambda s, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")))
            bar.close()
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        bar = tqdm(total=cfg.limits.max_steps, initial=self.step_count, desc="rl",
                   disable=not progress)
        while self.step_count < cfg.limits.max_steps:
            if cfg.limits.max_wall_s and time.perf_counter() - start > cfg.limits.max_wall_s:
                break
            metrics = self.step()
            bar.update(1)
            bar.set_postfix(reward=f"{metrics.get('reward/mean', 0):.3f}",
                            cps=f"{metrics['perf/completions_per_s']:.0f}")
            every = cfg.checkpoint.every_steps
            if cfg.checkpoint.dir and every and self.step_count % every == 0:
                self.save_checkpoint(Path(cfg.checkpoint.dir) / f"step-{self.step_count}")
        bar.close()
        if cfg.checkpoint.dir:
            self.save_checkpoint(Path(cfg.checkpoint.dir) / f"step-{self.step_count}")
        self.close()
        return metrics

    def close(self) -> None:
        for thread in (self.rollout_thread, self.verify_thread):  # batches queued ahead are dropped
            if thread is not None:
                thread.shutdown(wait=True, cancel_futures=True)
        close = getattr(self.engine, "close", None)
        if close:
            close()

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, directory: str | os.PathLike) -> Path:
        """Model, tokenizer, optimizer, sampler state, RNGs, config and step in one directory.

        Batches already generated ahead (overlap) are saved too, verified and with their policy
        versions, so a resumed job trains on exactly what this one would have.
        """
        path = Path(directory)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        pending = [{"trajs": b.trajs, "policy_version": b.policy_version}
                   for b in (self._ready(f) for f in self.pending)]
        self.model.save_pretrained(tmp / "model")
        self.tokenizer.save_pretrained(tmp / "model")
        torch.save({"backend": self.backend.state_dict(),
                    "sft_backend": self._sft_backend.state_dict() if hasattr(self, "_sft_backend") else None},
                   tmp / "optimizer.pt")
        torch.save({"engine": self.engine.state_dict(), "torch": torch.get_rng_state(),
                    "pending": pending, "sft_rng": self.sft_rng.getstate()}, tmp / "rng.pt")
        state = {"step": self.step_count, "sft_steps_done": self.sft_steps_done,
                 "initial_model_path": self.config.model.path,
                 "config": self.config.to_dict(), "sampler": self.sampler.state_dict()}
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        self._prune(path.parent)
        return path

    def _prune(self, parent: Path) -> None:
        keep = self.config.checkpoint.keep_last
        steps = sorted((p for p in parent.glob("step-*") if p.name[5:].isdigit()),
                       key=lambda p: int(p.name[5:]))
        if self.config.checkpoint.dir and Path(self.config.checkpoint.dir) == parent:
            for old in steps[:-keep]:
                shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def resume(cls, directory: str | os.PathLike, callbacks: Sequence[Callback] = (),
               verify_batch: VerifyBatch | None = None, **kwargs) -> "Job":
        """A job that continues exactly where the checkpoint in ``directory`` left off."""
        path = Path(directory)
        state = json.loads((path / "state.json").read_text())
        config = load_config(state["config"])
        if not config.model.reference_path and config.algorithm.kl_coef > 0:
            config.model.reference_path = state["initial_model_path"]
        job = cls(config, callbacks, verify_batch, weights_path=str(path / "model"), **kwargs)
        opt = torch.load(path / "optimizer.pt", weights_only=False)
        job.backend.load_state_dict(opt["backend"])
        if opt["sft_backend"] is not None:
            job._sft_backend = make_backend(
                job.model, replace(config.optimizer, warmup_steps=0, lr_schedule="constant"),
                lr=config.sft.lr)
            job._sft_backend.load_state_dict(opt["sft_backend"])
        rng = torch.load(path / "rng.pt", weights_only=False)
        job.engine.load_state_dict(rng["engine"])
        torch.set_rng_state(rng["torch"])
        job.sft_rng.setstate(rng["sft_rng"])
        job.sampler.load_state_dict(state["sampler"])
        job.step_count = state["step"]
        job.sft_steps_done = state["sft_steps_done"]
        job.engine_version = job.step_count  # the engine was built from the checkpoint's weights
        for i, saved in enumerate(rng["pending"]):
            if isinstance(saved, list):  # saved before batches kept their version: the i-th batch
                # ahead was queued i+1 steps before the checkpoint, behind that step's sync
                saved = {"trajs": saved, "policy_version": max(0, job.step_count - config.rollout.staleness + i)}
            done: cf.Future = cf.Future()
            done.set_result(Batch(saved["trajs"], saved["policy_version"]))
            job.pending.append(done)
        return job


class _ParamsView:
    """Something with ``parameters()``: a frozen snapshot handed to an engine's sync."""

    def __init__(self, params: list[torch.Tensor]):
        self._params = params

    def parameters(self):
        return iter(self._params)


# ----------------------------------------------------------------------------- metrics
def rewards_of(trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards (N,), group ids (N,) and validity (N,); infrastructure outcomes are invalid."""
    rewards = torch.tensor([t.verification.reward or 0.0 for t in trajs], dtype=torch.float32)
    groups = torch.tensor([t.group for t in trajs], dtype=torch.long)
    valid = torch.tensor([not t.verification.is_infrastructure for t in trajs], dtype=torch.bool)
    return rewards, groups, valid


def outcome_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """reward/<domain>, pass_rate/<domain>, outcome/<domain>/<outcome>, response length, truncation."""
    by_domain: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_domain[t.task.domain].append(t)
    out: dict[str, float] = {}
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
        out[f"response/length/{slug}"] = sum(sum(t.loss_mask) for t in ts) / len(ts)
    out["reward/mean"] = sum(all_rewards) / len(all_rewards) if all_rewards else 0.0
    out["response/length"] = sum(sum(t.loss_mask) for t in trajs) / max(len(trajs), 1)
    out["response/truncated_frac"] = sum(t.truncated for t in trajs) / max(len(trajs), 1)
    out["batch/infra_masked"] = float(sum(t.verification.is_infrastructure for t in trajs))
    out["batch/completions"] = float(len(trajs))
    return out
