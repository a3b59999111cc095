"""How a job's step gets its batch: tasks drawn (canaries planted), generated here or shared over
the ranks (multi-turn domains through their environments), verified by the pipeline, and, with
dynamic sampling, flat groups dropped and refilled; the sampler learns each group's pass rate.

:class:`BatchCollector` is :class:`trainer.job.Job`'s rollout side: it uses the job's config,
sampler, canaries, pipeline, engine, tokenizer, sampling parameters and domains.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable

import torch

from trainer import ranks
from trainer.algorithms import zero_variance_groups
from trainer.batch import rewards_of
from trainer.episodes import Trajectory, multi_turn, single_turn
from trainer.integrity import is_canary
from trainer.outcomes import Outcome
from trainer.parallel import my_share, rank_and_world
from trainer.pipeline import Request, _ParamsView
from trainer.tasks.base import Task
from trainer.watchdog import staged


class BatchCollector:
    """The rollout side of a :class:`~trainer.job.Job` (a mixin over the job's state)."""

    def _collect(self, metrics: dict) -> list[Trajectory]:
        """A verified batch; with dynamic sampling, flat groups are dropped and refilled."""
        alg, k = self.config.algorithm, self.config.rollout.prompts_per_step
        metrics["stage/generate_s"] = metrics["stage/verify_s"] = 0.0
        trajs = self.pipeline.next_batch(lambda: self._draw_requests(k), metrics).trajs
        self._update_sampler(trajs)
        metrics["batch/groups_generated"] = len({t.group for t in trajs})
        self.last_generated = list(trajs)
        if not alg.dynamic_sampling:
            return trajs
        kept, refills, dropped = self._drop_flat(trajs), 0, 0
        dropped += len({t.group for t in trajs}) - len({t.group for t in kept})
        # refills top the batch up to k groups; groups carried over from an earlier step may make
        # it larger, and none of those is dropped
        limit = max(k, len({t.group for t in kept}))
        while len({t.group for t in kept}) < k and refills < alg.max_refills:
            refills += 1
            requests = self._draw_requests(k - len({t.group for t in kept}))
            more = self.pipeline.refill(requests, metrics).trajs
            self._update_sampler(more)
            self.last_generated += more
            good = self._drop_flat(more)
            dropped += len({t.group for t in more}) - len({t.group for t in good})
            kept += good
        keep_groups = list(dict.fromkeys(t.group for t in kept))[:limit]
        metrics["batch/refills"] = refills
        metrics["batch/dropped_groups"] = dropped
        return [t for t in kept if t.group in set(keep_groups)]

    def _draw_requests(self, k: int) -> list[Request]:
        drawn = self.canaries.plant(self.sampler.draw(k))
        first, self.groups_drawn = self.groups_drawn, self.groups_drawn + len(drawn)
        return [(task, n, first + i) for i, (task, n) in enumerate(drawn)]

    def _generate(self, requests: list[Request]) -> list[Trajectory]:
        """Trajectories for ``(task, n, group)`` requests; multi-turn domains run their env.
        Called by the pipeline (on its rollout thread with overlap). Led on several ranks, every
        rank generates its share of the requests (whole groups) and the leader gathers them."""
        if not ranks.leading():
            return self._generate_here(requests)
        # Overlapped, this runs on the rollout thread, beside the main thread's commands: on the
        # generation channel, naming the policy version the followers generate with.
        overlapped = self.overlapped
        ranks.command("generate", requests, self.pipeline.engine_version, generation=overlapped)
        _, world = rank_and_world()
        shares = ranks.gather_generated(self._generate_here(my_share(requests, 0, world)), generation=overlapped)
        by_group: dict[int, list[Trajectory]] = defaultdict(list)
        for share in shares:
            for t in share:
                by_group[t.group].append(t)
        return [t for _, _, group in requests for t in by_group[group]]

    def follow_generate(self, requests: list[Request], version: int = 0) -> int:
        """A follower's share of the leader's ``generate`` command, sent back to it; how many
        requests (groups) it was. Overlapped (on the follower's generating thread), the engine
        first takes the weights of policy ``version``, which this rank's update kept."""
        rank, world = rank_and_world()
        mine = my_share(requests, rank, world)
        if self.overlapped:
            self._versions.load(self.engine, version)
        ranks.gather_generated(self._generate_here(mine), generation=self.overlapped)
        return len(mine)

    def _generate_here(self, requests: list[Request]) -> list[Trajectory]:
        with staged("generate"):
            return self._generate_unstaged(requests)

    def _generate_unstaged(self, requests: list[Request]) -> list[Trajectory]:
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
                                self._environments(slug), max_turns=cfg.rollout.max_turns,
                                max_episode_tokens=cfg.rollout.max_episode_tokens,
                                max_prompt_tokens=cfg.tokenizer.max_prompt_tokens)
        return trajs

    def _environments(self, slug: str) -> Callable[[Task], Any]:
        """A domain's environment factory, each environment given the job's ``env_context``."""
        factory = self.domains[slug].environment

        def make(task: Task) -> Any:
            env = factory(task)
            if (bind := getattr(env, "bind", None)) is not None:
                bind(self.env_context)
            return env
        return make

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
            if is_canary(group[0].task):  # impossible by design: says nothing of the task's difficulty
                continue
            passes = [t.verification.outcome is Outcome.PASS for t in group
                      if not t.verification.is_infrastructure]
            self.sampler.update(group[0].task, passes)


class PolicyVersions:
    """A follower's policy weights by version, kept by its main thread after each update and
    loaded into its engine by its generating thread when the leader asks for a batch of that
    version (overlapped: the leader's engine may still generate with an older one)."""

    def __init__(self) -> None:
        self._kept: dict[int, list[torch.Tensor]] = {}
        self._changed = threading.Condition()
        self.loaded = 0
        """The version the engine holds."""

    def start(self, version: int) -> None:
        """The engine was built holding policy ``version`` (0, or a checkpoint's step)."""
        self.loaded = version

    def keep(self, version: int, params: list[torch.Tensor]) -> None:
        with self._changed:
            self._kept[version] = params
            self._changed.notify_all()

    def load(self, engine, version: int) -> None:
        """Make ``engine`` hold policy ``version``, waiting for this rank's update to keep it;
        older versions are dropped (the leader never asks for a version older than the last)."""
        if version == self.loaded:
            return
        with self._changed:
            self._changed.wait_for(lambda: version in self._kept)
            params = self._kept[version]
            for old in [v for v in self._kept if v <= version]:
                del self._kept[old]
        with staged("weight sync"):
            engine.sync_weights(_ParamsView(params))
        self.loaded = version
