"""Does a tiny model measurably learn? Single-digit addition, exact-match reward, on CPU.

(a) weak base: the SFT stage on the addition table, stopped as soon as greedy exact match reaches
    ``--base-greedy`` (a weak model: sampled reward <= 0.35, greedy <= 0.5), then GRPO;
(b) the same GRPO from random init (TRL collapses there; entropy is reported).

32 prompts x 16 samples per step (``--prompts``, ``--n``; 16 x 8 before 2026-12-05, which took 186-230
steps to the 0.8 moving average), at most 4 new tokens. Prints the curves (every 10 steps) and,
as its last line, one JSON object: engine, base_sampled_reward, base_greedy_exact, steps_to_0_8,
final_reward_ma10, final_greedy_exact, scratch_final_reward_ma10, scratch_final_entropy, wall_s.

    python bench/learn_tiny.py [--engine torch|vllm] [--steps 300] [--seed 0] [--skip-scratch]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_recipe_options(parser: argparse.ArgumentParser, *, steps: int) -> None:
    """The options :func:`rl_config` and :func:`sft_to_base` read (``--steps`` defaults to
    ``steps``); bench/learn_ranks.py runs this recipe too."""
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lr-schedule", default="linear", choices=["constant", "linear", "cosine"])
    parser.add_argument("--prompts", type=int, default=32, help="prompts a step")
    parser.add_argument("--n", type=int, default=16, help="samples a prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-greedy", type=float, default=0.42)


def rl_config(model_path: str, engine: str, args) -> dict:
    """The recipe's job config: GRPO on single-digit addition from ``model_path``."""
    return {
        "model": {"path": model_path}, "seed": args.seed,
        "domains": {"builtin-addition": 1.0},
        "rollout": {"engine": engine, "prompts_per_step": args.prompts, "n": args.n, "max_new_tokens": 4,
                    "temperature": 1.0},
        "algorithm": {"name": "grpo", "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0,
                      "updates_per_batch": 2, "dynamic_sampling": True, "max_refills": 2},
        "optimizer": {"lr": args.lr, "beta2": 0.99, "lr_schedule": args.lr_schedule,
                      "micro_batch_size": 128, "max_grad_norm": 1.0},
        "sft": {"lr": 3e-3, "batch_size": 16},
        "limits": {"max_steps": args.steps},
    }


def moving_average(xs: list[float], k: int = 10) -> list[float]:
    """The average of each value and the up to ``k - 1`` before it."""
    return [sum(xs[max(0, i - k + 1):i + 1]) / len(xs[max(0, i - k + 1):i + 1]) for i in range(len(xs))]


def reward_curve(rewards: list[float]) -> tuple[list[float], int | None, list[float]]:
    """The rewards' 10-step moving average, the first step at which it reached 0.8 (from step 10
    on; None if never) and the average at every 10th step, rounded (the printed curve)."""
    ma10 = moving_average(rewards)
    hit = next((i + 1 for i, v in enumerate(ma10) if v >= 0.8 and i >= 9), None)
    return ma10, hit, [round(v, 3) for v in ma10[9::10]]


def sft_to_base(job, tasks, base_greedy: float) -> float:
    """The weak base: SFT steps (2 at a time, at most 400) until greedy exact match on ``tasks``
    reaches ``base_greedy``; returns that exact match."""
    greedy = 0.0
    while greedy < base_greedy and job.sft_steps_done < 400:
        job.sft(2)
        greedy = job.evaluate(tasks)["exact"]
    return greedy


def run_rl(job, steps: int, label: str, eval_tasks) -> dict:
    rewards, entropies = [], []
    for step in range(1, steps + 1):
        m = job.step()
        rewards.append(m["reward/builtin-addition"])
        entropies.append(m["policy/entropy"])
        if step % 10 == 0 or step == steps:
            ma = moving_average(rewards)[-1]
            greedy = job.evaluate(eval_tasks)["exact"] if step % 50 == 0 or step == steps else None
            print(f"[{label}] step {step:4d} reward {rewards[-1]:.3f} ma10 {ma:.3f} "
                  f"entropy {entropies[-1]:.3f} cps {m['perf/completions_per_s']:.0f}"
                  + (f" greedy {greedy:.2f}" if greedy is not None else ""), flush=True)
    ma10, hit, curve = reward_curve(rewards)
    return {"ma10": ma10[-1], "steps_to_0_8": hit, "greedy": job.evaluate(eval_tasks)["exact"],
            "entropy": entropies[-1], "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="torch", choices=["torch", "vllm"])
    add_recipe_options(parser, steps=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-scratch", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.catalogue.builtin import ADDITION

    t0 = time.perf_counter()
    tasks = ADDITION.all_tasks()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(build_tiny(os.path.join(tmp, "tiny"), seed=args.seed))
        # (a) weak base from the SFT stage, then GRPO
        job = Job(rl_config(path, args.engine, args))
        greedy = sft_to_base(job, tasks, args.base_greedy)
        base_sampled = job.evaluate(tasks, greedy=False, n=8)["reward"]
        print(f"[base] sft steps {job.sft_steps_done} greedy exact {greedy:.2f} "
              f"sampled reward {base_sampled:.3f}", flush=True)
        base = run_rl(job, args.steps, "base+grpo", tasks)
        job.close()
        scratch = {"ma10": None, "entropy": None, "curve": []}
        if not args.skip_scratch:
            # (b) GRPO from random init, same settings
            job = Job(rl_config(path, args.engine, args))
            scratch = run_rl(job, args.steps, "scratch", tasks)
            job.close()
    print("curve ma10 every 10 steps (base+grpo):", base["curve"])
    print("curve ma10 every 10 steps (scratch):  ", scratch["curve"])
    print(json.dumps({
        "engine": args.engine, "base_sampled_reward": round(base_sampled, 4),
        "base_greedy_exact": round(greedy, 4), "steps_to_0_8": base["steps_to_0_8"],
        "final_reward_ma10": round(base["ma10"], 4), "final_greedy_exact": round(base["greedy"], 4),
        "scratch_final_reward_ma10": None if scratch["ma10"] is None else round(scratch["ma10"], 4),
        "scratch_final_entropy": None if scratch["entropy"] is None else round(scratch["entropy"], 4),
        "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
