"""Multi-turn environment domains: how fast a task goes through the real path, per domain.

For each domain of the families asked (default: ``filings`` and ``tool_use``): draw tasks over
its levels, and for each one build the environment the trainer builds for an episode, drive it
with the task's reference transcript one call per turn (the multi-turn runner's loop, without a
model), and verify the final state; then verify the same transcript through the domain's
cascade (the ``environment`` stage that single-turn rollouts, SFT and the audit use). Reports per
domain: tasks per second for drawing, for the episode and for the cascade, the turns per episode,
whether every reference passed, and the sandbox-seconds per task (0 for environments that run
in the trainer's process, as these do).

    .venv/bin/python bench/envs.py [--tasks 40] [--families filings,tool_use]   # last line: JSON
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--families", default="filings,tool_use")
    args = parser.parse_args()

    from trainer.catalogue import all_domains
    from trainer.environments import split_actions
    from trainer.outcomes import Outcome
    from trainer.tasks.filings import filing

    families = set(args.families.split(","))
    out = {}
    for slug, spec in sorted(all_domains().items()):
        if spec.family not in families or spec.environment is None:
            continue
        rng = random.Random(0)
        filing.cache_clear()  # each domain pays for building its own reports (domains share seeds here)
        t0 = time.perf_counter()
        tasks = [spec.source.sample(rng, i % spec.source.levels) for i in range(args.tasks)]
        draw_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        turns, passed = 0, 0
        for task in tasks:
            env = spec.environment(task)
            env.reset(task)
            result = None
            for action in split_actions(str(task.answer)):
                turns += 1
                result = env.step(action)
                if result.done:
                    break
            passed += bool(result and result.done and result.outcome.outcome is Outcome.PASS)
        episode_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cascade_ok = sum(spec.verify(str(t.answer), t).outcome is Outcome.PASS for t in tasks)
        cascade_s = time.perf_counter() - t0
        row = {"draw_tasks_per_s": round(len(tasks) / draw_s, 1), "episode_tasks_per_s": round(len(tasks) / episode_s, 1),
               "cascade_tasks_per_s": round(len(tasks) / cascade_s, 1), "turns_per_task": round(turns / len(tasks), 2),
               "references_passed": f"{passed}/{len(tasks)}", "cascade_passed": f"{cascade_ok}/{len(tasks)}",
               "sandbox_s_per_task": 0.0}
        out[slug] = row
        print(f"{slug:26s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    print(json.dumps({"tasks": args.tasks, "domains": out}))


if __name__ == "__main__":
    main()
