"""From tasks to trajectories: single-turn completions and multi-turn environment episodes.

A :class:`Trajectory` is the prompt, then every token after it (model turns and environment
observations) with a loss mask that is 1 only on model tokens, and the behaviour policy's logprob
of each model token.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Callable

from trainer.outcomes import Verification
from trainer.rollout.base import RolloutEngine, SamplingParams
from trainer.tasks.base import Task

if TYPE_CHECKING:
    from trainer.environments import Environment


@dataclass
class Trajectory:
    """One sampled episode of one task."""

    task: Task
    """The task it answers."""
    group: int
    """Id of its group (one group per drawn task), unique within the job."""
    prompt_ids: list[int]
    """Prompt token ids."""
    response_ids: list[int] = field(default_factory=list)
    """Every token after the prompt: model turns and environment observations."""
    loss_mask: list[int] = field(default_factory=list)
    """1 on model tokens, 0 on environment tokens (same length as ``response_ids``)."""
    behaviour_logprobs: list[float] = field(default_factory=list)
    """Rollout engine's logprob per response token (0 on environment tokens)."""
    completion: str = ""
    """Text the verifier judges: the completion; for environments the last model turn, or what
    the environment submits for its domain's verifier to judge (a repository's final diff)."""
    truncated: bool = False
    """True when a length or turn budget cut the episode."""
    turns: int = 0
    """Model turns taken."""
    verification: Verification | None = None
    """Filled by the verifier (or the environment for multi-turn episodes)."""
    transcript: list[dict[str, str]] = field(default_factory=list)
    """Multi-turn episodes: each model turn (``{"role": "model", "text"}``) and each observation
    (``{"role": "tool", "text"}``, not trained on, with what the environment shows beside it:
    :attr:`StepResult.shown <trainer.environments.base.StepResult.shown>`), each cut to
    :data:`TRANSCRIPT_CHARS`."""

    def __setstate__(self, state: dict) -> None:
        """Trajectories a checkpoint pickled before a field existed take its default."""
        for f in fields(self):
            if f.name not in state and f.default_factory is not MISSING:
                state[f.name] = f.default_factory()
            elif f.name not in state and f.default is not MISSING:
                state[f.name] = f.default
        self.__dict__.update(state)


TRANSCRIPT_CHARS = 2_000
"""Longest text of one transcript entry kept (the tokens themselves are all kept)."""


def encode_prompt(tokenizer, text: str, max_tokens: int, use_chat_template: bool = False) -> list[int]:
    """Token ids of a prompt, cut from the left to ``max_tokens``."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
    else:
        ids = tokenizer(text)["input_ids"]
    return ids[-max_tokens:]


def encode_prompts(tokenizer, texts: list[str], max_tokens: int, use_chat_template: bool = False) -> list[list[int]]:
    """:func:`encode_prompt` of each text; plain prompts are encoded in one batched call."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        return [encode_prompt(tokenizer, t, max_tokens, use_chat_template) for t in texts]
    return [ids[-max_tokens:] for ids in tokenizer(texts)["input_ids"]] if texts else []


def single_turn(engine: RolloutEngine, tokenizer, requests: list[tuple[Task, int, int]],
                params: SamplingParams, *, max_prompt_tokens: int,
                use_chat_template: bool = False) -> list[Trajectory]:
    """Generate ``n`` completions for each ``(task, n, group)``; trajectories are not yet verified."""
    trajs: list[Trajectory] = []
    encoded = encode_prompts(tokenizer, [task.prompt for task, _, _ in requests], max_prompt_tokens,
                             use_chat_template)
    for (task, n, group), ids in zip(requests, encoded):
        trajs.extend(Trajectory(task=task, group=group, prompt_ids=ids) for _ in range(n))
    gens = engine.generate([t.prompt_ids for t in trajs], params)
    for traj, gen in zip(trajs, gens):
        traj.response_ids = list(gen.token_ids)
        traj.loss_mask = [1] * len(gen.token_ids)
        traj.behaviour_logprobs = list(gen.logprobs)
        traj.completion = gen.text
        traj.truncated = not gen.finished
        traj.turns = 1
    return trajs


def multi_turn(engine: RolloutEngine, tokenizer, requests: list[tuple[Task, int, int]],
               params: SamplingParams, make_env: Callable[[Task], Environment], *, max_turns: int,
               max_episode_tokens: int, max_prompt_tokens: int) -> list[Trajectory]:
    """Run environment episodes, all active ones batched per turn; returns verified trajectories.

    An episode ends when the environment says done, or is cut (``truncated``, outcome from a
    final ``step`` of its last turn) when it reaches ``max_turns`` model turns or
    ``max_episode_tokens`` tokens after the prompt.
    """
    episodes: list[tuple[Trajectory, Environment]] = []
    try:
        for task, n, group in requests:
            for _ in range(n):
                env = make_env(task)
                episodes.append((Trajectory(task=task, group=group, prompt_ids=[]), env))
                first = env.reset(task)
                episodes[-1][0].prompt_ids = tokenizer(first)["input_ids"][-max_prompt_tokens:]
        _run_turns(engine, tokenizer, episodes, params, max_turns=max_turns,
                   max_episode_tokens=max_episode_tokens)
    finally:  # an environment that holds a sandbox (a shell session) gives it back, whatever happened
        for _, env in episodes:
            _close(env)
    return [traj for traj, _ in episodes]


def _close(env: "Environment") -> None:
    close = getattr(env, "close", None)
    if close is not None:
        close()


def _run_turns(engine: RolloutEngine, tokenizer, episodes: list[tuple[Trajectory, "Environment"]],
               params: SamplingParams, *, max_turns: int, max_episode_tokens: int) -> None:
    """The turn loop of :func:`multi_turn`: every active episode's next model turn, batched."""
    active = list(range(len(episodes)))
    while active:
        contexts = [episodes[i][0].prompt_ids + episodes[i][0].response_ids for i in active]
        gens = engine.generate(contexts, params)
        still = []
        for i, gen in zip(active, gens):
            traj, env = episodes[i]
            budget = max_episode_tokens - len(traj.response_ids)
            take = gen.token_ids[:budget]
            traj.response_ids += take
            traj.loss_mask += [1] * len(take)
            traj.behaviour_logprobs += gen.logprobs[:len(take)]
            traj.turns += 1
            traj.completion = tokenizer.decode(take, skip_special_tokens=True)
            traj.transcript.append({"role": "model", "text": traj.completion[:TRANSCRIPT_CHARS]})
            out_of_budget = (len(take) < len(gen.token_ids) or traj.turns >= max_turns
                             or len(traj.response_ids) >= max_episode_tokens)
            result = env.step(traj.completion)
            if result.done:
                _conclude(traj, env, result.outcome, "")
                continue
            traj.transcript.append({**{k: v[:TRANSCRIPT_CHARS] for k, v in (result.shown or {}).items()},
                                    "role": "tool", "text": result.observation[:TRANSCRIPT_CHARS]})
            obs = tokenizer(result.observation, add_special_tokens=False)["input_ids"]
            if out_of_budget or len(traj.response_ids) + len(obs) >= max_episode_tokens:
                traj.truncated = True
                _conclude(traj, env, result.outcome, "episode budget exhausted")
                continue
            traj.response_ids += obs
            traj.loss_mask += [0] * len(obs)
            traj.behaviour_logprobs += [0.0] * len(obs)
            still.append(i)
        active = still


def _conclude(traj: Trajectory, env: "Environment", outcome: Verification | None, cut: str) -> None:
    """The episode's verdict: the environment's own, or, from an environment that leaves it to
    its domain's verifier (one with ``submission()``), none yet and the submission as the
    completion to judge; a cut episode of any other environment fails."""
    if outcome is not None:
        traj.verification = outcome
        return
    submission = getattr(env, "submission", None)
    if submission is not None:
        traj.completion = submission()
        _close(env)  # the episode is over: a held sandbox goes back now, not after the batch
        return
    traj.verification = Verification.failed(details={"reason": cut or "the environment gave no verdict",
                                                     "turns": traj.turns})
