"""Steps per hour and generator idle time at staleness 0, 1 and 2, side by side.

The tiny model trains on single-digit addition; every completion is verified by a real sandbox
execution that takes about 200 ms (the sandboxed code domain's cost), 8 executions at a time as
a verify pool would (the sandbox pool's global and domain limits are set to ``--slots``), each
supervised from its own process as verify workers do (``--verify-in threads``: from threads of
the trainer's process, where their polling competes with generation for the GIL).

With staleness s, batches k+1 .. k+s are generated and verified while step k trains, and each
chunk of ``--engine-batch`` samples goes to verification as soon as it is sampled (streaming);
with staleness 0 each step generates, verifies and updates in turn. ``--max-new-tokens`` sets
the cost of sampling against the fixed cost of verifying: at the default 320 sampling a batch
takes about as long as verifying it, the regime of LLM RL on code where overlap pays; at 64
sampling is a tenth of verification and no schedule can beat (g + v + u) / (v + u).
Besides the goals' figures it reports each stage's busy fraction (generate, verify, update) and
the policy lag of the trained batches. Last line: one JSON object with steps_per_hour (by
staleness), speedup_1_vs_0 and generator_idle (by staleness).

    .venv/bin/python bench/pipeline.py [--steps 12] [--backend bwrap|docker] [--verify-in processes|threads]
                                       [--slots 8] [--max-new-tokens 320] [--engine-batch 8]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = "import time\ntime.sleep(0.2)\nprint('checked')\n"


def sandbox_check(backend: str | None) -> str:
    """One sandboxed execution of the checker (in a verify process); its verdict's status."""
    from workers.sandbox import Limits, execute

    return execute({"check.py": PROGRAM}, ["python3", "check.py"], Limits(cpu_s=5, wall_s=10),
                   backend=backend, domain="bench-pipeline").status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="measured steps per setting (after 2 warm-up steps)")
    parser.add_argument("--slots", type=int, default=8, help="sandbox executions in parallel")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=320,
                        help="generation length: sets the generation cost against the fixed verification cost "
                             "(320: sampling a batch takes about as long as verifying it, as in LLM RL)")
    parser.add_argument("--engine-batch", type=int, default=8,
                        help="rollout.batch_size: sequences sampled together; with staleness > 0 each such "
                             "chunk goes to verification as soon as it is sampled (streaming)")
    parser.add_argument("--verify-in", choices=["threads", "processes"], default="processes",
                        help="supervise the sandboxes from threads of the trainer's process, or from --slots "
                             "separate processes (as verify workers do for the run driver)")
    args = parser.parse_args()
    # The pool admits --slots executions at once (its default is 2 per CPU).
    os.environ["TEMPER_SANDBOX_GLOBAL_LIMIT"] = os.environ["TEMPER_SANDBOX_DOMAIN_LIMIT"] = str(args.slots)

    import torch

    torch.set_num_threads(1)
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.outcomes import Outcome, Verification
    from trainer.catalogue import get

    if args.verify_in == "processes":
        import multiprocessing

        pool = cf.ProcessPoolExecutor(args.slots, mp_context=multiprocessing.get_context("spawn"))
    else:
        pool = cf.ThreadPoolExecutor(args.slots)
    exact = get("builtin-addition").verify

    def verify_batch(items):
        statuses = pool.map(sandbox_check, [args.backend] * len(items))
        return [exact(completion, task) if status == "ok" else Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": status})
                for (completion, task), status in zip(items, statuses)]

    model = str(build_tiny(tempfile.mkdtemp() + "/m", layers=2))
    results = {}
    for staleness in (0, 1, 2):
        job = Job({"model": {"path": model}, "domains": {"builtin-addition": 1.0}, "seed": 0,
                   "rollout": {"prompts_per_step": 8, "n": 4, "max_new_tokens": args.max_new_tokens, "staleness": staleness,
                               "batch_size": args.engine_batch},
                   "optimizer": {"lr": 5e-4}}, verify_batch=verify_batch)
        for _ in range(2):
            job.step()
        busy = {stage: 0.0 for stage in ("generate", "verify", "update")}
        lags, windows, t0 = [], 0.0, time.perf_counter()
        for _ in range(args.steps):
            metrics = job.step()
            lags.append(int(metrics["batch/policy_lag"]))
            windows += metrics["pipeline/window_s"]  # these tile the measured steps' time
            for stage in busy:
                busy[stage] += metrics[f"pipeline/{stage}_busy_s"]
        elapsed = time.perf_counter() - t0
        job.close()
        results[staleness] = {"steps_per_hour": round(3600 * args.steps / elapsed, 1),
                              "generator_idle": round(1 - busy["generate"] / windows, 3),
                              "busy_frac": {s: round(b / windows, 3) for s, b in busy.items()},
                              "busy_s_per_step": {s: round(b / args.steps, 3) for s, b in busy.items()},
                              "max_policy_lag": max(lags)}
        print(f"staleness {staleness}: {results[staleness]}", flush=True)
    pool.shutdown()
    out = {
        "steps_per_hour": {str(s): r["steps_per_hour"] for s, r in results.items()},
        "speedup_1_vs_0": round(results[1]["steps_per_hour"] / results[0]["steps_per_hour"], 3),
        "speedup_2_vs_0": round(results[2]["steps_per_hour"] / results[0]["steps_per_hour"], 3),
        "generator_idle": {str(s): r["generator_idle"] for s, r in results.items()},
        "busy_frac": {str(s): r["busy_frac"] for s, r in results.items()},
        "max_policy_lag": {str(s): r["max_policy_lag"] for s, r in results.items()},
        "samples_per_step": 32, "verify_s_per_sample": 0.2, "sandbox_slots": args.slots,
        "max_new_tokens": args.max_new_tokens, "verify_in": args.verify_in,
        "engine_batch": args.engine_batch,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
