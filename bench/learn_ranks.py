"""Does an overlapped run on several ranks learn like one on one rank? bench/learn_tiny.py's task
(single-digit addition, exact-match reward, the same weak SFT base and GRPO settings), run three
ways side by side from the same base:

- ``1rank_s1``: one process, ``rollout.staleness`` 1 (generation of the next batch overlaps the update);
- ``2ranks_s1``: two led gloo ranks (trainer/ranks.py: each generates half of every step's
  groups, the update is data parallel), staleness 1;
- ``2ranks_s0``: two led ranks, staleness 0 (synchronous).

Each runs the domains' own verifier in process, with ``--verify-s`` seconds added to every
verification call (a remote sandbox's latency, which the overlap hides). Prints the moving-average
reward every 10 steps and, as its last line, one JSON object: per configuration the reward's
final 10-step average, the steps to a 0.8 average, the greedy exact match at the end and steps/s;
``learning_gap_2ranks_vs_1rank_s1`` (difference of the final averages) and
``speedup_2ranks_s1_vs_s0``.

    python bench/learn_ranks.py [--steps 120] [--verify-s 0.3] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from learn_tiny import add_recipe_options, reward_curve, rl_config, sft_to_base  # noqa: E402

CONFIGS = {"1rank_s1": (1, 1), "2ranks_s1": (2, 1), "2ranks_s0": (2, 0)}
"""name -> (ranks, staleness)."""


def weak_base(directory: str, args) -> tuple[str, float]:
    """bench/learn_tiny.py's weak base: SFT until greedy exact match reaches ``--base-greedy``."""
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.catalogue.builtin import ADDITION

    tasks = ADDITION.all_tasks()
    job = Job(rl_config(str(build_tiny(os.path.join(directory, "tiny"), seed=args.seed)), "torch", args))
    try:
        greedy = sft_to_base(job, tasks, args.base_greedy)
        path = os.path.join(directory, "base")
        job.model.save_pretrained(path)
        job.tokenizer.save_pretrained(path)
    finally:
        job.close()
    return path, greedy


def greedy_exact(checkpoint: str) -> float:
    from trainer.job import Job
    from trainer.catalogue.builtin import ADDITION

    job = Job.resume(checkpoint)
    try:
        return job.evaluate(ADDITION.all_tasks())["exact"]
    finally:
        job.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_options(parser, steps=120)
    parser.add_argument("--verify-s", type=float, default=0.3, help="seconds added to every verification call")
    args = parser.parse_args()
    args.threads = 1

    import torch

    torch.set_num_threads(1)
    from tests.trainer.rank_groups import launch

    began = time.perf_counter()
    out: dict = {"steps": args.steps, "verify_s": args.verify_s}
    with tempfile.TemporaryDirectory() as tmp:
        base, greedy = weak_base(tmp, args)
        print(f"[base] greedy exact {greedy:.2f}", flush=True)
        out["base_greedy_exact"] = round(greedy, 4)
        for name, (world, staleness) in CONFIGS.items():
            cfg = rl_config(base, "torch", args)
            cfg.pop("sft")
            cfg["rollout"]["staleness"] = staleness
            final = os.path.join(tmp, name)
            case = {"config": cfg, "final": final, "steps": args.steps, "verify": "domain",
                    "verify_s": args.verify_s, "reward_key": "reward/builtin-addition"}
            t0 = time.perf_counter()
            codes = launch([case], world, os.path.join(tmp, f"{name}.json"), led=world > 1)
            if any(codes):
                raise SystemExit(f"{name}: ranks exited with {codes}")
            result = json.loads(Path(tmp, f"{name}.json").read_text())[0]
            ma10, hit, curve = reward_curve(result["rewards"])
            out[name] = {"final_reward_ma10": round(ma10[-1], 4), "steps_to_0_8": hit,
                         "final_greedy_exact": round(greedy_exact(final), 4),
                         "steps_per_s": round(len(result["step_s"]) / sum(result["step_s"]), 3),
                         "wall_s": round(time.perf_counter() - t0, 1), "curve": curve}
            print(f"[{name}] ma10 every 10 steps: {out[name]['curve']}", flush=True)
    out["learning_gap_2ranks_vs_1rank_s1"] = round(out["2ranks_s1"]["final_reward_ma10"] - out["1rank_s1"]["final_reward_ma10"], 4)
    out["speedup_2ranks_s1_vs_s0"] = round(out["2ranks_s1"]["steps_per_s"] / out["2ranks_s0"]["steps_per_s"], 3)
    out["wall_s"] = round(time.perf_counter() - began, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
