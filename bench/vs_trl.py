"""Temper against TRL's GRPOTrainer, side by side in one run on this machine.

Same weak base checkpoint (built here with Temper's SFT stage from the tiny model), same task
(single-digit addition, exact match), group size 8, 16 prompts per step, at most 4 new tokens,
same learning rate, no KL, seed 0, and by default the same algorithm (one optimizer step per
batch, no dynamic sampling; ``--temper-updates 2 --temper-dynamic-sampling 1`` is Temper's
stronger recipe). TRL generates with plain transformers ``generate``.

Prints both reward curves and, as its last line, one JSON object: temper_completions_per_s,
trl_completions_per_s, ratio, temper_reward_at_end, trl_reward_at_end (10-step moving averages
of sampled reward at the same step), plus steps and the settings used.

    python bench/vs_trl.py [--steps 300] [--lr 5e-4]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_base(tmp: str, seed: int, target_greedy: float) -> str:
    """Tiny model -> SFT until greedy exact match reaches the target -> saved checkpoint."""
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.catalogue.builtin import ADDITION

    path = str(build_tiny(os.path.join(tmp, "tiny"), seed=seed))
    job = Job({"model": {"path": path}, "seed": seed, "sft": {"lr": 3e-3, "batch_size": 16},
               "rollout": {"max_new_tokens": 4}})
    greedy = 0.0
    while greedy < target_greedy and job.sft_steps_done < 400:
        job.sft(2)
        greedy = job.evaluate(ADDITION.all_tasks())["exact"]
    base = os.path.join(tmp, "base")
    job.model.save_pretrained(base)
    job.tokenizer.save_pretrained(base)
    print(f"[base] sft steps {job.sft_steps_done}, greedy exact {greedy:.2f}", flush=True)
    return base


def ma10(xs: list[float]) -> float:
    return sum(xs[-10:]) / len(xs[-10:])


def run_temper(base: str, args) -> dict:
    from trainer.job import Job

    job = Job({"model": {"path": base}, "seed": args.seed, "domains": {"builtin-addition": 1.0},
               "rollout": {"prompts_per_step": 16, "n": 8, "max_new_tokens": 4, "staleness": args.temper_staleness},
               "algorithm": {"kl_coef": 0.0, "updates_per_batch": args.temper_updates,
                             "dynamic_sampling": bool(args.temper_dynamic_sampling), "max_refills": 2},
               "optimizer": {"lr": args.lr, "beta2": 0.99, "lr_schedule": "linear",
                             "micro_batch_size": 128},
               "limits": {"max_steps": args.steps}})
    rewards, completions = [], 0
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        m = job.step()
        rewards.append(m["reward/builtin-addition"])
        completions += int(m["batch/completions"])
        if step % 25 == 0:
            print(f"[temper] step {step} ma10 {ma10(rewards):.3f}", flush=True)
    wall = time.perf_counter() - t0
    job.close()
    return {"completions_per_s": completions / wall, "reward_at_end": ma10(rewards), "wall_s": wall}


def run_trl(base: str, args, tmp: str) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.catalogue.builtin import ADDITION

    rng = random.Random(args.seed)
    rows = [{"prompt": t.prompt, "answer": t.answer} for t in ADDITION.all_tasks()] * 40
    rng.shuffle(rows)
    dataset = Dataset.from_list(rows)

    def exact(prompts, completions, answer, **_):
        return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

    config = GRPOConfig(output_dir=os.path.join(tmp, "trl"), learning_rate=args.lr,
                        per_device_train_batch_size=128, num_generations=8,
                        max_completion_length=4, beta=0.0, temperature=1.0, adam_beta2=0.99,
                        max_steps=args.steps, logging_steps=1, report_to="none", seed=args.seed,
                        use_cpu=True, save_strategy="no", lr_scheduler_type="linear",
                        warmup_steps=0, bf16=False, dataloader_num_workers=0,
                        disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(base)
    tok = AutoTokenizer.from_pretrained(base)
    rewards: list[float] = []

    class Log(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))
                if len(rewards) % 25 == 0:
                    print(f"[trl] step {len(rewards)} ma10 {ma10(rewards):.3f}", flush=True)

    trainer = GRPOTrainer(model=model, reward_funcs=exact, args=config, train_dataset=dataset,
                          processing_class=tok, callbacks=[Log()])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    return {"completions_per_s": args.steps * 128 / wall, "reward_at_end": ma10(rewards),
            "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--base-greedy", type=float, default=0.42)
    parser.add_argument("--temper-updates", type=int, default=1,
                        help="optimizer steps per batch (TRL's: 1); 2 learns more per step at more cost per step")
    parser.add_argument("--temper-dynamic-sampling", type=int, default=0,
                        help="drop and refill groups whose rewards are all equal (TRL: no)")
    parser.add_argument("--temper-staleness", type=int, default=0,
                        help="Temper's async overlap: generate step k+1 while step k trains (TRL has no such mode)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        base = make_base(tmp, args.seed, args.base_greedy)
        temper = run_temper(base, args)
        torch.manual_seed(args.seed)
        trl = run_trl(base, args, tmp)
    print(json.dumps({
        "temper_completions_per_s": round(temper["completions_per_s"], 1),
        "trl_completions_per_s": round(trl["completions_per_s"], 1),
        "ratio": round(temper["completions_per_s"] / trl["completions_per_s"], 2),
        "temper_reward_at_end": round(temper["reward_at_end"], 4),
        "trl_reward_at_end": round(trl["reward_at_end"], 4),
        "steps": args.steps, "lr": args.lr, "threads": args.threads,
        "temper_updates_per_batch": args.temper_updates,
        "temper_dynamic_sampling": bool(args.temper_dynamic_sampling), "temper_staleness": args.temper_staleness,
        "temper_wall_s": round(temper["wall_s"], 1), "trl_wall_s": round(trl["wall_s"], 1)}))


if __name__ == "__main__":
    main()
