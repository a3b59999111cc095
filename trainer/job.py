"""A post-training job, one step at a time: generate -> verify -> advantages -> update -> sync.

    job = Job(load_config("run.yaml"), callbacks=[print_metrics])
    while job.step_count < job.config.limits.max_steps:
        metrics = job.step()
    job.save_checkpoint("ckpt/step-100")
    job = Job.resume("ckpt/step-100")

``verify_batch(list[(completion, Task)]) -> list[Verification]`` may be injected (the run driver
fans verification out to worker queues); by default each domain's ``verify`` runs inline.
Callbacks get ``(step, metrics, samples)``; ``samples`` are plain dicts of sampled trajectories.

How a step gets its batch, and when the engine takes new weights, is the pipeline's business
(:mod:`trainer.pipeline`: in turn with ``rollout.staleness = 0``, overlapped with ``s > 0``);
the SFT stage is :mod:`trainer.sft`, the checkpoint format :mod:`trainer.checkpoint`.
"""
from __future__ import annotations

import os
import shutil
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from trainer import catalogue, ranks
from trainer.algorithms import (clipped_policy_loss, domain_balance_weights, group_advantages, importance_health,
                                importance_sums, token_entropy, token_logprobs)
from trainer.batch import chunks, outcome_metrics, rewards_of, score
from trainer.checkpoint import Checkpoint
from trainer.config import ConfigError, TrainerConfig, load_config
from trainer.collect import BatchCollector, PolicyVersions
from trainer.episodes import Trajectory, single_turn
from trainer.integrity import CanaryPlanter, Regrader, is_canary, regrade_disagrees, regrade_metrics, trains
from trainer.models.lean import LeanLlama
from trainer.models.load import load_model, load_tokenizer, resolve_device
from trainer.optim import TorchBackend, make_backend, uses_deepspeed
from trainer.outcomes import Outcome, Verification
from trainer.parallel import all_reduce_grads, all_reduce_sums, barrier, equal_shares, gather_to_leader, rank_and_world
from trainer.pipeline import StageClocks, VerifyBatch, pipeline_for
from trainer.rollout import make_engine
from trainer.rollout.base import SamplingParams
from trainer.sampler import TaskSampler
from trainer.sft import SupervisedStage
from trainer.tasks.base import Task
from trainer.verifiers.artifacts import retaining, sample_fields, split
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.watchdog import staged

Callback = Callable[[int, dict, list], None]


# ----------------------------------------------------------------------------- verification
def verify_inline(domains: dict[str, catalogue.DomainSpec]) -> VerifyBatch:
    """Default verifier fan-out: each domain's cascade in this process, over that domain's items
    together (``Cascade.run_many``: a process stage's calls in one message to one verifier process).

    A verifier that raises is an infrastructure failure (judge_error, masked), not a reward of 0:
    a domain whose cascade raises on the batch is verified item by item, so only the item that
    makes it raise gets one.
    """
    def one(completion: str, task: Task) -> Verification:
        try:
            return domains[task.domain].verify(completion, task)
        except Exception as exc:  # noqa: BLE001 - any verifier crash is masked and counted
            return Verification(Outcome.JUDGE_ERROR, 0.0, {"error": repr(exc)})

    def verify_batch(items: list[tuple[str, Task]]) -> list[Verification]:
        out: list[Verification | None] = [None] * len(items)
        by_domain: dict[str, list[int]] = {}
        for i, (_, task) in enumerate(items):
            by_domain.setdefault(task.domain, []).append(i)
        for slug, idxs in by_domain.items():
            try:
                results = domains[slug].cascade(None).run_many([items[i] for i in idxs])
            except Exception:  # noqa: BLE001 - one by one: the crash is the crashing item's
                results = [one(*items[i]) for i in idxs]
            for i, verification in zip(idxs, results):
                out[i] = verification
        return out  # type: ignore[return-value]
    return verify_batch


RANK_SUMS = ("loss", "tokens", "clipped", "kl", "entropy", "mm_abs", "mm_kl", "mm_tokens", "is_sum", "is_sq")
"""The update's per-rank sums that are summed over the ranks before they become metrics."""


# ----------------------------------------------------------------------------- the job
class Job(BatchCollector):
    """One post-training run, driven step by step (by the CLI or the Celery run driver); how a
    step's batch is drawn, generated and filtered is :class:`trainer.collect.BatchCollector`'s."""

    def __init__(self, config: TrainerConfig | dict | str, callbacks: Sequence[Callback] = (),
                 verify_batch: VerifyBatch | None = None, *, samples_per_step: int = 16,
                 weights_path: str | None = None, announce: bool = True, env_context: VerifyContext = NO_CONTEXT):
        """``announce``: as the leader of several ranks (:mod:`trainer.ranks`), tell the followers to
        build the same job (False: the caller announces, as :meth:`resume` does). ``env_context``:
        the services the episodes' environments may use (a repository's ``run_tests`` runs in its
        sandbox); without one they say the sandbox is not there."""
        self.config = cfg = load_config(config)
        if not cfg.model.path:
            raise ConfigError([("model.path", "is required")])
        self.closed = False
        self.last_weight_spread: float | None = None
        """After a checkpoint of a led job on several ranks: how far apart the ranks' weights were."""
        self.callbacks = list(callbacks)
        self.env_context = env_context
        self.samples_per_step = samples_per_step
        self.domains = self._resolve_domains(cfg)
        if announce and ranks.leading():
            # Before anything that every rank must do together (DeepSpeed's engine is built by
            # every rank at once), so the followers build the same job beside this one.
            ranks.command("init", cfg.to_dict(), weights_path)
        # every verification holds only the artifacts the run keeps (artifacts.keep, max_bytes)
        self.verify_batch = staged_verify(retaining(verify_batch or verify_inline(self.domains), cfg.artifacts))
        pipeline_cls = pipeline_for(cfg.rollout.staleness)  # chosen once: in turn, or overlapped
        self._load_policy(cfg, weights_path, shares_weights=pipeline_cls.shares_weights)
        self.sampler = TaskSampler({s: d.source for s, d in self.domains.items()}, cfg.domains,
                                   cfg.sampler, n=cfg.rollout.n, seed=cfg.seed)
        self.canaries = CanaryPlanter(cfg.integrity.canary_fraction, cfg.seed)
        self.regrader = Regrader(cfg.integrity.regrade_fraction, cfg.seed)
        self._regrade_pool = ThreadPoolExecutor(1, thread_name_prefix="regrade")
        self.last_regraded: list[tuple[Trajectory, Verification]] = []
        """The last step's regrades: each regraded trajectory with its stricter verdict."""
        self.sft_stage = SupervisedStage(self.model, self.tokenizer, self.sampler, cfg, self.device)
        self.params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
        self.clocks = StageClocks()
        self.pipeline = pipeline_cls(self.engine, self.backend.weights(), self._generate, self.verify_batch, self.clocks,
                                 staleness=cfg.rollout.staleness, chunk_size=cfg.rollout.batch_size,
                                 verify_budget_s=cfg.rollout.verify_budget_s)
        self.overlapped = cfg.rollout.staleness > 0
        """Generation runs ahead of the update (a rollout thread; on a follower, a generating thread)."""
        self._versions = PolicyVersions()
        """A follower's weights by policy version, for its generating thread (overlapped)."""
        self.step_count = 0
        self.groups_drawn = 0
        """Groups drawn so far: the next group's id (ids are unique within the job, so groups
        carried over from an earlier batch never share one with the batch they join)."""
        self.last_generated: list[Trajectory] = []
        """Every trajectory the last step generated and verified (refills and dropped groups too)."""
        self.last_trained: list[Trajectory] = []
        """The trajectories the last step's update trained on (kept groups, infrastructure outcomes masked out)."""

    def _load_policy(self, cfg: TrainerConfig, weights_path: str | None, *, shares_weights: bool) -> None:
        """The tokenizer, the policy (from ``weights_path`` when given), the frozen reference
        (with a KL term), the optimizer backend and the rollout engine (sharing the policy's
        weights when the pipeline allows it), and the lean forward where the model takes it."""
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.model.device)
        self.tokenizer = load_tokenizer(cfg.model, cfg.tokenizer)
        self.model = load_model(weights_path or cfg.model.path, cfg.model, self.device)
        self.reference = None
        if cfg.algorithm.kl_coef > 0:
            self.reference = load_model(cfg.model.reference_path or cfg.model.path, cfg.model,
                                        self.device, trainable=False)

        def engine_over(model, share: bool):
            return make_engine(cfg.rollout.engine, model, self.tokenizer, seed=cfg.seed,
                               batch_size=cfg.rollout.batch_size, share_weights=share,
                               lean_forward=cfg.model.lean_forward,
                               gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
                               prefix_caching=cfg.rollout.prefix_caching,
                               tensor_parallel_size=cfg.rollout.tensor_parallel_size,
                               max_model_len=cfg.tokenizer.max_prompt_tokens + cfg.rollout.max_episode_tokens)

        # ZeRO-3 partitions the policy's parameters over the ranks: the engine takes its own whole
        # copy first, and its weight syncs gather them (the backend's weights()).
        partitioned = uses_deepspeed(cfg.optimizer) and cfg.optimizer.zero_stage == 3
        self.engine = engine_over(self.model, share=False) if partitioned else None
        self.backend = make_backend(self.model, cfg.optimizer,
                                    total_steps=cfg.limits.max_steps * cfg.algorithm.updates_per_batch)
        self.model = self.backend.model
        if self.engine is None:
            self.engine = engine_over(self.model, share=shares_weights)
        # The lean forward (Llama-family models, parameters whole on the rank) scores each
        # distinct prompt once per micro-batch; the reference must take the same path.
        self.lean = LeanLlama.wrap(self.model) if cfg.model.lean_forward and not partitioned else None
        self.reference_lean = None
        if self.lean is not None and self.reference is not None:
            self.reference_lean = LeanLlama.wrap(self.reference)
            if self.reference_lean is None:
                self.lean = None

    @staticmethod
    def _resolve_domains(cfg: TrainerConfig) -> dict[str, catalogue.DomainSpec]:
        known = catalogue.all_domains()
        missing = [(f"domains.{s}", "unknown domain") for s in cfg.domains if s not in known]
        if missing:
            raise ConfigError(missing)
        return {s: known[s] for s in cfg.domains}

    # -- one step --------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """Run one RL step; returns its metrics (also passed to every callback)."""
        t_step = time.perf_counter()
        self.clocks.open(t_step)
        metrics: dict[str, float] = {}
        trajs = self._collect(metrics)
        # The share of the batch graded again (the reward-hacking watch) is verified while the
        # update runs, off the step's critical path; its verdicts are read after the weight sync.
        regrading = self._regrade_pool.submit(self.regrader.regrade, self.last_generated, self.verify_batch)
        rewards, groups, valid = rewards_of(trajs)
        self.last_trained = [t for t, ok in zip(trajs, valid.tolist()) if ok]
        alg = self.config.algorithm
        adv = group_advantages(rewards, groups, valid, estimator=alg.name, scale=alg.scale_rewards)
        # What the update weighs each sample by; the samples and metrics show the plain advantage.
        train_adv = self._balanced(trajs, adv, valid, metrics) if alg.domain_balance == "equal" else adv
        with self.clocks.running("update"):
            t0 = time.perf_counter()
            if ranks.leading():
                ranks.command("update", trajs, train_adv, self.step_count + 1)
            with staged("update"):
                self._update(trajs, train_adv, metrics)
            metrics["stage/update_s"] = time.perf_counter() - t0
            with staged("weight sync"):
                metrics["stage/sync_s"] = self.pipeline.sync(self.step_count + 1)
        self.step_count += 1
        step_s = time.perf_counter() - t_step
        metrics["stage/step_s"] = step_s
        metrics.update(self.clocks.window_metrics())
        metrics.update(outcome_metrics(self.last_generated))
        with self.clocks.running("verify"):
            self.last_regraded = regrading.result()
        metrics.update(regrade_metrics(self.last_regraded))
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

    def _balanced(self, trajs: list[Trajectory], adv: torch.Tensor, valid: torch.Tensor, metrics: dict) -> torch.Tensor:
        """Advantages scaled so that each domain weighs the same in the policy loss (the clipped
        objective is linear in a positive scale of the advantage); ``batch/domain_weight/<d>``."""
        token = self.config.algorithm.loss_aggregation == "token"
        sizes = torch.tensor([float(sum(t.loss_mask)) if token else 1.0 for t in trajs])
        domains = [t.task.domain for t in trajs]
        weights = domain_balance_weights(domains, sizes, valid)
        for d in dict.fromkeys(domains):
            mine = [w for w, x, ok in zip(weights.tolist(), domains, valid.tolist()) if x == d and ok]
            if mine:
                metrics[f"batch/domain_weight/{d}"] = mine[0]
        return adv * weights

    # -- a follower's part (its share of the batch: collect.BatchCollector.follow_generate) --
    def follow_update(self, trajs: list[Trajectory], adv: torch.Tensor, version: int) -> None:
        """A follower's part of the leader's update (the gradients are summed over the ranks), and
        its engine's weight sync (overlapped: the weights are kept for the generating thread,
        which loads them when the leader asks for a batch of this version)."""
        with staged("update"):
            self._update(trajs, adv, {})
        with staged("weight sync"):
            if self.overlapped:
                self._versions.keep(version, [p.detach().clone() for p in self.backend.weights().parameters()])
            else:
                self.pipeline.sync(version)
        self.step_count = version

    # -- update ----------------------------------------------------------------------------
    def _update(self, trajs: list[Trajectory], adv: torch.Tensor, metrics: dict) -> None:
        """Gradient steps on the valid trajectories, micro-batched with accumulation."""
        cfg, alg = self.config, self.config.algorithm
        valid_idx = [i for i, t in enumerate(trajs) if trains(t)]
        totals = defaultdict(float)
        rank, world = rank_and_world()
        if not valid_idx or (alg.kl_coef == 0 and not any(adv[i] != 0 for i in valid_idx)):
            # no learning signal at all: report entropy, take no optimizer step (under ZeRO-3 a
            # forward is a collective: every rank scores the same batch, the leader reports it)
            seen = trajs if self.backend.collective_forward and world > 1 else self.last_generated
            metrics.update(self._inspect(seen))
            metrics["batch/skipped_update"] = 1.0
            return
        minibatches = [valid_idx[i::alg.updates_per_batch] for i in range(alg.updates_per_batch)]
        # Data parallel (trainer/parallel.py): each rank scores its share of a mini-batch's
        # micro-batches, divided by the whole mini-batch's normaliser; the gradients are summed
        # before the step.
        reduce_grads = world > 1 and isinstance(self.backend, TorchBackend)  # DeepSpeed reduces its own
        metrics["optim/lr"] = self.backend.lr()
        for u, idx in enumerate(m for m in minibatches if m):
            if alg.loss_aggregation == "token":
                normalizer = float(sum(sum(trajs[i].loss_mask) for i in idx)) or 1.0
            else:
                normalizer = float(len(idx))
            # Whole micro-batches per rank, as one process would form them: each one's forward is
            # then the one process's, bit for bit, and only the order of the final sum differs.
            micros = list(chunks(idx, cfg.optimizer.micro_batch_size))
            for micro, weight in equal_shares(micros, rank, world, pad=self.backend.pads):
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
                self.backend.backward(loss if weight else loss * 0.0)
                if not weight:  # a padding micro-batch: its backward only keeps the ranks in step
                    continue
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
                        w_sum, w_sq = importance_sums(logp.detach(), batch["old_logp"], m)
                        totals["is_sum"] += w_sum
                        totals["is_sq"] += w_sq
            if reduce_grads:
                all_reduce_grads([p for p in self.model.parameters() if p.requires_grad])
            totals["grad_norm"] += self.backend.step()
        if world > 1:
            totals.update(all_reduce_sums(totals, RANK_SUMS))
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
            **importance_health(totals["is_sum"], totals["is_sq"], totals["mm_tokens"]),
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
            w_sum, w_sq = importance_sums(logp, batch["old_logp"], m)
            sums["is_sum"] += w_sum
            sums["is_sq"] += w_sq
        tok = max(sums["tokens"], 1.0)
        return {"policy/entropy": sums["entropy"] / tok, "mismatch/logprob_abs": sums["abs"] / tok,
                "mismatch/kl": sums["kl"] / tok, **importance_health(sums["is_sum"], sums["is_sq"], sums["tokens"])}

    def _samples(self, trajs: list[Trajectory], adv: torch.Tensor) -> list[dict]:
        """Up to ``samples_per_step`` trajectories, spread over groups, as plain dicts."""
        firsts = list({t.group: i for i, t in reversed(list(enumerate(trajs)))}.values())[::-1]
        rest = [i for i in range(len(trajs)) if i not in set(firsts)]
        # Evidence first, beyond the count: every canary of the step that passed (dynamic sampling
        # drops a canary's flat group from the batch), so the alert's link finds it.
        evidence = [t for t in self.last_generated if is_canary(t.task) and t.verification.outcome is Outcome.PASS][:64]
        disagreed = {id(t): v for t, v in self.last_regraded if regrade_disagrees(v)}
        evidence += [t for t in self.last_generated if id(t) in disagreed][:64]
        shown = {id(t) for t in evidence}
        chosen = [(t, 0.0) for t in evidence] + [(trajs[i], float(adv[i])) for i in firsts + rest if id(trajs[i]) not in shown]
        out = []
        for t, advantage in chosen[:max(self.samples_per_step, len(evidence))]:
            v = t.verification
            out.append({"domain": t.task.domain, "task_id": t.task.id, "prompt": t.task.prompt,
                        "completion": t.completion, "reward": v.reward, "outcome": v.outcome.value,
                        **sample_fields(v.details), "advantage": advantage, "turns": t.turns,
                        "truncated": t.truncated, "tokens": len(t.response_ids),
                        **({"transcript": t.transcript} if t.transcript else {}),
                        **({"canary": t.task.meta["canary"]} if is_canary(t.task) else {}),
                        **({"regrade": {"outcome": disagreed[id(t)].outcome.value, "details": split(disagreed[id(t)].details)[0]}}
                           if id(t) in disagreed else {})})
        return out

    # -- SFT and evaluation ----------------------------------------------------------------
    def sft(self, steps: int | None = None, callback: Callable[[int, float], None] | None = None) -> list[float]:
        """Supervised steps on reference answers (next-token loss on the answer only); with
        ``sft.until_pass_rate`` a domain leaves the stage once it passes that share of its
        training tasks, and the stage ends early when every domain has."""
        cfg, stage = self.config.sft, self.sft_stage
        todo = cfg.steps if steps is None else steps
        if cfg.until_pass_rate <= 0:
            losses = stage.train(todo, callback)
        else:
            losses = []
            while not stage.finished:
                if stage.steps_done % cfg.check_every == 0 and stage.checked_at != stage.steps_done:
                    self._sft_check()
                    if stage.finished:
                        break
                if todo <= 0:
                    break
                chunk = min(todo, cfg.check_every - stage.steps_done % cfg.check_every)
                losses += stage.train(chunk, callback)
                todo -= chunk
        if ranks.leading():  # the stage ran here alone: every rank takes its weights
            ranks.command("params")
            ranks.broadcast_params(self.model)
        self.pipeline.resync()
        return losses

    def _sft_check(self) -> None:
        """``sft.until_pass_rate``: every domain samples its check tasks with the current weights
        (rollout temperature, one completion each). Those at the rate leave the stage; one that
        left and has since fallen below it (forgetting while the others train) comes back."""
        self.pipeline.resync()
        self.sft_stage.checked_at = self.sft_stage.steps_done
        for slug in self.sampler.slugs:
            rate = self.evaluate(self.sft_stage.check_tasks(slug), greedy=False)["exact"]
            if rate >= self.config.sft.until_pass_rate:
                self.sft_stage.leave(slug, rate)
            else:
                self.sft_stage.rejoin(slug)

    @property
    def sft_steps_done(self) -> int:
        return self.sft_stage.steps_done

    @property
    def sft_done(self) -> bool:
        """The stage has nothing left to do: its steps ran, or every domain left it."""
        return self.sft_stage.steps_done >= self.config.sft.steps or self.sft_stage.finished

    def evaluate(self, tasks: list[Task], *, greedy: bool = True, n: int = 1) -> dict[str, float]:
        """Mean reward of ``n`` completions per task (greedy by default); engine RNG is untouched."""
        params = replace(self.params, temperature=0.0 if greedy else self.params.temperature)
        def greedy_pass() -> list[Trajectory]:
            saved = self.engine.state_dict()
            out = single_turn(self.engine, self.tokenizer, [(t, n, i) for i, t in enumerate(tasks)],
                              params, max_prompt_tokens=self.config.tokenizer.max_prompt_tokens)
            self.engine.load_state_dict(saved)
            return out

        trajs = self.pipeline.on_engine(greedy_pass)  # the current weights, after what is queued
        self.pipeline.verify(trajs)
        rewards = [t.verification.reward for t in trajs if t.verification.reward is not None]
        return {"reward": sum(rewards) / max(len(rewards), 1),
                "exact": sum(t.verification.outcome is Outcome.PASS for t in trajs) / len(trajs)}

    # -- whole run -------------------------------------------------------------------------
    def run(self, progress: bool = True) -> dict[str, float]:
        """SFT stage (once), then RL steps until ``limits``; checkpoints as configured."""
        cfg = self.config
        if not self.sft_done and self.step_count == 0:
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
            bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}" if "reward/mean" in metrics else "masked",
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
        if self.closed:
            return
        self.closed = True
        if ranks.leading():
            try:
                ranks.command("stop")
            except RuntimeError:  # a rank already lost cannot be told (the watchdog names it)
                pass
        self.pipeline.close()  # batches queued ahead are dropped
        self._regrade_pool.shutdown(wait=False, cancel_futures=True)  # a regrade in flight ends on its own
        if ranks.leading() and self.overlapped:
            try:  # after the rollout thread's last batch: the followers' generating threads end
                ranks.command("stop", generation=True)
            except RuntimeError:
                pass
        close = getattr(self.engine, "close", None)
        if close:
            close()

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, directory: str | os.PathLike) -> Path:
        """Model, tokenizer, optimizer, sampler state, RNGs (every rank's), config and step in one
        directory (:mod:`trainer.checkpoint`).

        Batches already generated ahead (overlap) are saved too, verified and with their policy
        versions, so a resumed job trains on exactly what this one would have. On several ranks
        every rank takes part: a DeepSpeed optimizer's shards are written by each rank, ZeRO-3's
        parameters are gathered whole for the model's export, and each rank's sampling RNG is kept.
        """
        with staged("checkpoint"):
            return self._save_checkpoint(directory)

    def _save_checkpoint(self, directory: str | os.PathLike) -> Path:
        # First: generating the batches ahead advances the engines' RNGs (every rank's, so before
        # the followers are told to save theirs).
        ahead = self.pipeline.ahead()
        if ranks.leading():
            ranks.command("checkpoint", str(directory))
        rank, world = rank_and_world()
        shards = None
        if hasattr(self.backend, "save_shards"):
            shards = Path(directory).with_name(Path(directory).name + ".shards")
            if rank == 0:
                shutil.rmtree(shards, ignore_errors=True)
            barrier()
            self.backend.save_shards(shards)  # every rank its own, together
            barrier()
        rank_rng = gather_to_leader({"engine": self.engine.state_dict(), "torch": torch.get_rng_state()})
        saved = Checkpoint(step=self.step_count, config=self.config, sampler=self.sampler.state_dict(),
                           optimizer=self.backend.state_dict(), engine_rng=self.engine.state_dict(),
                           torch_rng=torch.get_rng_state(), ahead=ahead, sft=self.sft_stage.state_dict(),
                           rank_rng=rank_rng if world > 1 else None)
        with self.backend.gathered():
            if world == 1:
                return saved.save(directory, self.model, self.tokenizer, shards=shards)
            # Data parallel: the weights are equal on every rank, so rank 0 writes them alone and
            # the checkpoint resumes on any number of ranks (a ZeRO optimizer's shards: on as many
            # as wrote them); the others wait until it is written.
            path = saved.save(directory, self.model, self.tokenizer, shards=shards) if rank == 0 else Path(directory)
            barrier()
            if ranks.led():
                self.last_weight_spread = spread = ranks.weight_spread(self.model)
                if spread > ranks.DIVERGENCE_TOL:
                    raise RuntimeError(f"the ranks' weights diverged (relative spread {spread:.2e} of their sums, "
                                       f"above {ranks.DIVERGENCE_TOL:g}) at step {self.step_count}")
        return path

    @classmethod
    def resume(cls, directory: str | os.PathLike, callbacks: Sequence[Callback] = (),
               verify_batch: VerifyBatch | None = None, **kwargs) -> "Job":
        """A job that continues exactly where the checkpoint in ``directory`` left off."""
        saved = Checkpoint.load(directory)
        if ranks.leading():  # before the job is built: every rank builds it together
            ranks.command("resume", str(directory))
        job = cls(saved.config, callbacks, verify_batch, weights_path=str(Path(directory) / "model"), announce=False, **kwargs)
        if hasattr(job.backend, "load_shards"):
            job.backend.load_shards(Path(directory) / "zero", saved.optimizer)
        else:
            job.backend.load_state_dict(saved.optimizer)
        job.sft_stage.load_state_dict(saved.sft)
        rank, world = rank_and_world()
        mine = saved.rank_rng[rank] if saved.rank_rng and len(saved.rank_rng) == world else None
        job.engine.load_state_dict(mine["engine"] if mine else saved.engine_rng)
        torch.set_rng_state(mine["torch"] if mine else saved.torch_rng)
        job.sampler.load_state_dict(saved.sampler)
        job.step_count = saved.step
        job.pipeline.restore(saved.ahead, version=saved.step)  # the engine has the checkpoint's weights
        job.groups_drawn = 1 + max((t.group for b in saved.ahead for t in b.trajs), default=-1)
        return job


def staged_verify(verify_batch: VerifyBatch) -> VerifyBatch:
    """``verify_batch`` marked as the ``verify`` stage in this rank's heartbeat."""
    def verify(items):
        with staged("verify"):
            return verify_batch(items)
    return verify
